"""Slurm: everything trainguard knows about it, and the only code that runs a Slurm command.

``commands`` (the one seam: argv, timeout, counted failures), ``parse`` (what Slurm prints),
``marker`` (trainguard's note in a job's ``AdminComment``), ``exclusions`` (the next attempt's
``ExcNodeList``), ``requeue`` (how a requeue goes, from the job's state), ``settings``
(``SlurmSettings``), ``adapter`` (the ``Scheduler``: decisions to commands, verified), ``collector``
(the scheduler's view as metrics) and ``watchdog`` (releases holds a dead responder left behind).
"""
