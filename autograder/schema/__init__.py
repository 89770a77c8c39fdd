"""What every stage of a grading shares, and nothing else: the event schema
that probes write and checks read (events.py), and the types of a run
(run.py). It imports neither torch nor ctypes, and no other part of the
package: the rank side, the launcher, the judge and the reports all import it,
and it imports none of them.
"""
