"""gbatchd's loop steps, one module each, which the Daemon runs in order on every pass.

The Daemon (gbatch/head/daemon.py) runs them in this order:

    collect   runs that ended or vanished, nodes lost and heard again (EndedRuns)
    limits    --signal warnings, TIME_LIMIT mail, time limits, stopping runs (RunLimits)
    schedule  the runnable window, its filters (filters), the plan, pending reasons
              (Scheduling): it decides the starts; dispatch does them (Dispatcher)
    gpus      each node's new report folded into its runs' GPU usage; idle GPUs (GpuSampler)
    conditions  GPU_FOREIGN, DISK_FULL and NODE_DOWN told once per episode (NodeConditions)

`runs` is what they share: a run's start confirmed, its end recorded, and what the
loop remembers of each live run until it ends. Each step takes the store, the fleet
and the config it needs, and the pass's `now` as a parameter.
"""
