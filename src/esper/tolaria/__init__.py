"""Tolaria: the governor (snapshot, panic, rollback) and the execution engine (streams, AMP, batches).

Submodules are imported directly (`esper.tolaria.engine`, `esper.tolaria.governor`, ...); importing the
package itself loads nothing heavy.
"""
