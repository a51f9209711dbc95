"""Backends: where a step runs. `base.Backend` is the protocol; each backend is a package.

- `local/`: the embedded default, step processes on this machine (admission, memory limits);
- `kubernetes/`: a batch/v1 Job per attempt on a vCluster tenant (or any cluster);
- `slurm/`: sbatch jobs, one all-or-nothing allocation per multi-node gang step.

Backends know nothing of Dagster's executor: they take a `LaunchRequest` and report
`StepStatus`. `k8s_ai_orchestrator.launch.backends.make_backend` builds one from config.
"""
