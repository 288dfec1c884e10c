"""The floor every layer stands on: tripwire's errors, the portable CPU pin, the determinism context.

- `errors`: the exceptions, each naming the file, region, checkpoint or flag at fault, and the golden-file reader;
- `numerics`: the CPU kernel pin that makes bitwise goldens verify on other x86-64 machines;
- `context`: the settings a bitwise golden depends on, captured, keyed and compared;
- `files`: paths tripwire reads and writes, checked before use (inputs are regular files, outputs can be written);
- `folders`: folders as file name prefixes, as imported and with links resolved (whose a frame is);
- `lines`: the line a frame runs, looked up by its code and instruction instead of decoded at every read;
- `git`: every git command tripwire runs, built so that no argument from outside reaches git as an option;
- `kernels`: kernels registered over ops' own (`torch.library`) and put back, for the watches that see an op on every
  thread at the cost of that op alone;
- `quiet`: one warning ignored while tripwire raises it, every record of the loop's warnings left as it was;
- `names`: dotted names made distinct, so that no leaf of a digested value is lost to another of the same name;
- `closure`: what of a source tree one run read (the files, folder listings and questions a history walk reuses a
  result by);
- `unhook`: putting back what a recording replaced, keeping what the loop replaced meanwhile (a wrapper it made of a
  stand-in holds the original after).

Nothing here imports another tripwire package. This package, `errors` and `numerics` load no torch (the noxfile
and a `conftest.py` set the pin before torch starts).

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
