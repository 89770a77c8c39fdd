"""The rank side: what runs inside each rank (the runner and its probes).

`python -m autograder.rank SPEC [--rank N]` starts one rank from a spec file,
so a launcher on another host or under another agent can start ranks.
"""
