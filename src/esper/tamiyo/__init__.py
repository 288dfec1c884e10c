"""tamiyo: the controller's senses and brain: signals (`signals.py`), Obs V3 features (`features.py`), action
masks (`masks.py`), the masked distribution (`distributions.py`), the factored recurrent actor-critic
(`policy.py`) and the rule-based controller (`heuristic.py`).

Imports only esper.leyline and torch. Submodules are imported directly (`from esper.tamiyo.policy import ...`),
so every import is visible to static tools; importing the package itself loads nothing.
"""
