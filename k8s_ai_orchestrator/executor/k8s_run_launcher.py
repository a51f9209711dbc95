"""`AIK8sRunLauncher`: Dagster's `K8sRunLauncher` whose terminate reaches the steps of a run
whose run worker pod is gone.

Dagster's `K8sRunLauncher` terminates a run by deleting its run worker's Job: the run worker,
stopped by its pod's deletion, cancels the steps it launched. When the run worker is already
dead (its pod OOM-killed or lost with its node, and run monitoring has not resumed it yet, or
will not: `max_resume_run_attempts` spent), nobody is left to cancel them: the step Jobs run to
their end and the run stays `CANCELING` until run monitoring gives up on it. This launcher is
`K8sRunLauncher` in every other respect (the same config keys, the same run worker Jobs, resume
and health checks). Its terminate reads the run worker's health first: a run worker whose Job
has failed (`WorkerStatus.FAILED`, as run monitoring reads it) has every attempt of its steps
cancelled here, on every backend its executor config names (`run_launcher.cancel_orphaned_run`,
shared with `ProcessRunLauncher`), and the run is marked canceled at once. A run worker that
runs, or whose health cannot be read, is left to Dagster's own terminate.

Example (`dagster.yaml`; with Dagster's Helm chart, `runLauncher.type: CustomRunLauncher`
with this module and class):

    run_launcher:
      module: k8s_ai_orchestrator
      class: AIK8sRunLauncher
      config:
        job_namespace: dagster
        service_account_name: dagster
        instance_config_map: dagster-instance
    run_monitoring:
      enabled: true
      max_resume_run_attempts: 3
"""

from __future__ import annotations

from dagster._core.launcher.base import WorkerStatus
from dagster_k8s import K8sRunLauncher

from .run_launcher import cancel_orphaned_run


class AIK8sRunLauncher(K8sRunLauncher):
    """`K8sRunLauncher` whose terminate also reaches the steps of a run whose run worker died."""

    def terminate(self, run_id: str) -> bool:
        """Dagster's terminate (delete the run worker's Job); when the run worker had already
        failed, also cancel every attempt of the run's steps and mark the run canceled."""
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        gone = self.check_run_worker_health(run).status == WorkerStatus.FAILED
        deleted = bool(super().terminate(run_id))
        if not gone:
            return deleted
        cancel_orphaned_run(self._instance, run, self.__class__)
        return True


__all__ = ["AIK8sRunLauncher"]
