"""A loop recorded from outside and results compared anywhere: the machinery behind scenario files.

- `instrument`: regions, iteration marks, checkpoints and event calls placed on named callables;
- `launch`: someone else's loop run as it is (a script as `__main__`, a module, a function);
- `record`: one scenario run with every instrument in place, into a `Result`;
- `result`: results as folders of files, saved, loaded and compared anywhere;
- `compare`: a verdict per check between two results: where, what kind, how big;
- `commands`: `python -m tripwire run | compare | budget`.

The language of scenario files themselves is `tripwire.scenario`.
"""
