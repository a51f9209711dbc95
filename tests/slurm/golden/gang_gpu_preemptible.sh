#!/bin/bash
#SBATCH --job-name=k8sai.4f1c2d3e.train
#SBATCH --comment=k8s_ai:run=4f1c2d3e-aaaa-bbbb-cccc-0123456789ab,step=train,attempt=1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=65536M
#SBATCH --gres=gpu:a100:8
#SBATCH --partition=gpu
#SBATCH --account=ml-research
#SBATCH --time=1440
#SBATCH --signal=B:USR2@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=/shared/k8s_ai/4f1c2d3e-aaaa-bbbb-cccc-0123456789ab/train/attempt-1.log
#SBATCH --chdir=/shared/k8s_ai/4f1c2d3e-aaaa-bbbb-cccc-0123456789ab/train
set -u
export DAGSTER_HOME=/shared/dagster
export K8S_AI_BACKEND=slurm
export K8S_AI_SLURM_JOB_DIR=/shared/k8s_ai/4f1c2d3e-aaaa-bbbb-cccc-0123456789ab/train
k8s_ai_requeue=1
k8s_ai_save_s=60
k8s_ai_failed=/shared/k8s_ai/4f1c2d3e-aaaa-bbbb-cccc-0123456789ab/train/k8s_ai_step_failed
rm -f -- "$k8s_ai_failed"
k8s_ai_usr2=0
k8s_ai_step=""
trap 'k8s_ai_usr2=1; kill -USR2 "$k8s_ai_step" 2>/dev/null' USR2
trap 'kill -TERM "$k8s_ai_step" 2>/dev/null' TERM
/opt/venv/bin/python -m dagster api execute_step '{"__class__": "ExecuteStepArgs", "step_keys_to_execute": ["train"]}' &
k8s_ai_step=$!
while :; do
    wait "$k8s_ai_step"
    k8s_ai_rc=$?
    if [ "$k8s_ai_rc" -le 128 ] || ! kill -0 "$k8s_ai_step" 2>/dev/null; then
        break
    fi
    if [ "$k8s_ai_usr2" = 1 ] && [ "$k8s_ai_requeue" = 1 ]; then
        k8s_ai_deadline=$((SECONDS + k8s_ai_save_s))
        while kill -0 "$k8s_ai_step" 2>/dev/null && [ "$SECONDS" -lt "$k8s_ai_deadline" ]; do
            sleep 0.2
        done
        kill -0 "$k8s_ai_step" 2>/dev/null || { wait "$k8s_ai_step"; k8s_ai_rc=$?; }
        break
    fi
done
if [ "$k8s_ai_usr2" = 1 ] && [ "$k8s_ai_requeue" = 1 ] && [ "$k8s_ai_rc" != 0 ]; then
    echo "k8s_ai: requeueing job $SLURM_JOB_ID after the checkpoint window" >&2
    scontrol requeue "$SLURM_JOB_ID"
fi
if [ "$k8s_ai_rc" = 0 ] && [ -e "$k8s_ai_failed" ]; then
    echo "k8s_ai: $(head -c 2000 "$k8s_ai_failed"); the job exits 1" >&2
    k8s_ai_rc=1
fi
exit "$k8s_ai_rc"
