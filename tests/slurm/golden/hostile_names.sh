#!/bin/bash
#SBATCH --job-name=k8sai.x____tou.train_x____touch__tmp_pwned____touch__tmp_pwned___i-a2804c1e
#SBATCH --comment=k8s_ai:run=x%27%22%3B%20touch%20%2Ftmp%2Fpwned%3B%20%24%28touch%20%2Ftmp%2Fpwned%29%20%60id%60%0Arm%20-rf%20%2F%20%23,step=train%5Bx%27%22%3B%20touch%20%2Ftmp%2Fpwned%3B%20%24%28touch%20%2Ftmp%2Fpwned%29%20%60id%60%0Arm%20-rf%20%2F%20%23%5D,attempt=1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=65536M
#SBATCH --signal=B:USR2@30
#SBATCH --no-requeue
#SBATCH --open-mode=append
#SBATCH --output=/shared/k8s_ai/x____touch__tmp_pwned____touch__tmp_pwned___id__rm_-258c4e69/train_x____touch__tmp_pwned____touch__tmp_pwned___i-a2804c1e/attempt-1.log
#SBATCH --chdir=/shared/k8s_ai/x____touch__tmp_pwned____touch__tmp_pwned___id__rm_-258c4e69/train_x____touch__tmp_pwned____touch__tmp_pwned___i-a2804c1e
set -u
export K8S_AI_NOTE='x'"'"'"; touch /tmp/pwned; $(touch /tmp/pwned) `id`
rm -rf / #'
export K8S_AI_SLURM_JOB_DIR=/shared/k8s_ai/x____touch__tmp_pwned____touch__tmp_pwned___id__rm_-258c4e69/train_x____touch__tmp_pwned____touch__tmp_pwned___i-a2804c1e
k8s_ai_requeue=0
k8s_ai_save_s=15
k8s_ai_failed=/shared/k8s_ai/x____touch__tmp_pwned____touch__tmp_pwned___id__rm_-258c4e69/train_x____touch__tmp_pwned____touch__tmp_pwned___i-a2804c1e/k8s_ai_step_failed
rm -f -- "$k8s_ai_failed"
k8s_ai_usr2=0
k8s_ai_step=""
trap 'k8s_ai_usr2=1; kill -USR2 "$k8s_ai_step" 2>/dev/null' USR2
trap 'kill -TERM "$k8s_ai_step" 2>/dev/null' TERM
/usr/bin/python3 -m dagster api execute_step '{"__class__": "ExecuteStepArgs", "step_keys_to_execute": ["train"]}' &
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
