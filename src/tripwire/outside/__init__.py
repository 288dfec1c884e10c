"""A loop recorded from outside and results compared anywhere: the machinery behind scenario files.

- `instrument`: regions, iteration marks, checkpoints and event calls placed on named callables;
- `stand`: the stand-in an instrument puts in front of a callable, kept out of what torch.compile sees;
- `launch`: someone else's loop run as it is (a script as `__main__`, a module, a function);
- `capture`: what a checkpoint digests of what it captures, descending into objects; a capture of no value is an
  error;
- `blame`: whose fault a crash is, the loop's or tripwire's own, read from the traceback;
- `record`: one scenario run with every instrument in place, into a `Result`;
- `children`: the processes a recorded loop starts, which a recording does not see into, counted by kind;
- `seeds`: whether a recorded loop drew from torch's default generator without seeding it;
- `result`: results as folders of files, saved, loaded and compared anywhere;
- `compare`: a verdict per check between two results: where, what kind, how big;
- `commands`: `python -m tripwire run | compare | budget`.

The language of scenario files themselves is `tripwire.scenario`.

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
