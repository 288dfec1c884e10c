"""`python -m tripwire history`: a scenario walked over a project's git history, each commit compared with the last.

- `tripwire.history.commits`: which commits (`git rev-list A..B -- paths`), and each one's worktree;
- `tripwire.history.runner`: one result per commit, each in its own worktree and its own process, cached;
- `tripwire.history.forkserver`: torch and tripwire imported once per job, a forked child per commit;
- `tripwire.history.reuse`: a commit's result reused for another whose tree answers everything the run read alike;
- `tripwire.history.rows`: each commit compared with the one before, classified (identical, drift, a value change,
  a structure change, syncs, telemetry, a crash, not applicable);
- `tripwire.history.bisect`: the first commit showing each kind of change between A and B;
- `tripwire.history.report`: the table as markdown, JSON and a picture (commits as rows, checks as columns);
- `tripwire.history.cli`: the command line, with live progress.

Nothing here imports torch: the commits run in worker processes (`python -P -m tripwire run`), and the comparison
loads their result folders.

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
