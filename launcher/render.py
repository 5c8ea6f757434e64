"""Render (pure): a Plan becomes the text of an sbatch script, from a template in launcher/job_templates/
(package data, so a non-editable install renders the same).

The result is a complete script a user can read, keep and `sbatch` by hand; `--dry-run` prints it.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from string import Template

import srl_hpc
from launcher.plan import HetGroup, Plan
from srl_hpc.graph import compact

TEMPLATES = Path(__file__).resolve().parent / "job_templates"


def render(plan: Plan, command: str, template: str = "hetjob.sbatch", version: str = srl_hpc.__version__) -> str:
    text = (TEMPLATES / template).read_text()
    groups = []
    for index, group in enumerate(plan.groups):
        groups.append(_group_lines(plan, group, first=index == 0))
    sbatch_lines = "\n#SBATCH hetjob\n".join("\n".join(lines) for lines in groups)
    setup = "".join(f"{line}\n" for line in plan.setup)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in plan.env)
    trap, check = _requeue_lines(plan)
    return Template(text).substitute(
        version=version, command=command, name=plan.experiment, run_dir=shlex.quote(plan.run_dir),
        sbatch_lines=sbatch_lines, setup_lines=setup, export_lines=exports, ntasks=plan.ntasks,
        het_groups=",".join(str(i) for i in range(len(plan.groups))), python=shlex.quote(plan.python),
        requeue_trap=trap, requeue_check=check)


def _requeue_lines(plan: Plan) -> tuple[str, str]:
    """With slurm.requeue: on Slurm's signal the run stops cleanly (SIGTERM to every task: the trainer
    checkpoints), then the job requeues itself while it has requeues left. A run that ended by itself as
    the signal came (its summary says succeeded or failed) is not requeued, and its outcome is the job's."""
    if plan.requeue is None:
        return "", ""
    _, max_requeues = plan.requeue
    trap = ("# slurm.requeue: Slurm sends USR1 to this script before the time limit (--signal=B:USR1@N)\n"
            "requeue=0\n"
            'on_time_limit() { requeue=1; scancel --signal=TERM "$SLURM_JOB_ID"; }\n'
            "trap on_time_limit USR1\n")
    run_dir = shlex.quote(plan.run_dir)
    check = (f"outcome=$({shlex.quote(plan.python)} -m srl_hpc.rundir {run_dir} --outcome)\n"
             f'case "$outcome" in  # a run that ended by itself as the signal came is done: its outcome is the job\'s\n'
             f"    succeeded) exit 0 ;;\n"
             f"    failed) exit 1 ;;\n"
             f"esac\n"
             f'if [ "$requeue" = 1 ] && [ "${{SLURM_RESTART_COUNT:-0}}" -lt {max_requeues} ]; then\n'
             f'    scontrol requeue "$SLURM_JOB_ID"  # runs this script again: the next attempt resumes\n'
             f"fi\n")
    return trap, check


def _group_lines(plan: Plan, g: HetGroup, first: bool) -> list[str]:
    lines = [f"# group {g.name}: {', '.join(compact(g.workers))}"]
    if first:  # job-wide options live in the first group
        lines += [f"#SBATCH --job-name={plan.job_name}",
                  "# the batch script's own output; each worker logs to logs/<worker>.log",
                  f"#SBATCH --output={plan.run_dir}/slurm-%j.out",
                  f"#SBATCH --chdir={plan.run_dir}"]
        if plan.requeue:
            lines += ["# slurm.requeue: signalled before the time limit, the run checkpoints and requeues itself",
                      "#SBATCH --requeue", f"#SBATCH --signal=B:USR1@{plan.requeue[0]}"]
    lines.append(f"#SBATCH --time={plan.time}")
    if g.partition:
        lines.append(f"#SBATCH --partition={g.partition}")
    if plan.account:
        lines.append(f"#SBATCH --account={plan.account}")
    if plan.qos:
        lines.append(f"#SBATCH --qos={plan.qos}")
    lines += [f"#SBATCH --nodes={g.nodes}",
              f"#SBATCH --ntasks={g.ntasks}",
              f"#SBATCH --cpus-per-task={g.cpus_per_task}",
              f"# memory per node: {g.tasks_per_node} task(s) x mem_per_task",
              f"#SBATCH --mem={g.mem_mb}M"]
    if g.gpus_per_node:
        lines += ["# one GPU per task; each task's node-local MPI rank picks its GPU",
                  f"#SBATCH --gres=gpu:{g.gpus_per_node}"]
    if g.constraint:
        lines.append(f"#SBATCH --constraint={g.constraint}")
    lines += [f"#SBATCH {option}" for option in plan.sbatch_options]
    return lines
