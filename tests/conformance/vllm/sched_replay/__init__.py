"""The parts of scheduler_replay.py (the script: command line, hash-seed pin, output).

engine: vLLM's configuration and its real Scheduler, as the command line asks (importing it
    imports torch and vLLM).
workers: the connector's worker side over fake copy engines (OffloadingConnector,
    SimpleCPUOffloadConnector).
state: what the run counts and the hooks, fake workers and loop share.
hooks: wrappers around vLLM's methods that only observe (hits, preemptions, evictions).
trace: the trace's rows made into vLLM Requests, and the sampled tokens.
loop: the engine loop (EngineCore.step and the model runner's connector lifecycle), the
    step dump and the counts the script prints.

Nothing here is meant to be run on its own: `python scheduler_replay.py ...` sets the
environment vLLM reads (and PYTHONHASHSEED) before anything here is imported.
"""
