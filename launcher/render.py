"""Render (pure): a Plan becomes the text of an sbatch script (with `slurm.layout: jobs`, one per group), from
a template in job_templates/ (package data, so a non-editable install renders the same) or the user's own
(`slurm.template`).

The result is a complete script a user can read, keep and `sbatch` by hand; `--dry-run` prints it and
`srl-launch prepare` writes it into a run directory that is ready to run. job_templates/README.md lists
the variables a template gets.
"""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path
from string import Template

import srl_hpc
from launcher.plan import HetGroup, Plan, PlanError
from srl_hpc.config.slurm import ContainerConfig
from srl_hpc.graph import compact

TEMPLATES = Path(str(resources.files("job_templates")))


def render(plan: Plan, command: str, version: str = srl_hpc.__version__) -> str:
    text = Path(plan.template).expanduser().read_text() if plan.template else (TEMPLATES / "hetjob.sbatch").read_text()
    groups = []
    for index, group in enumerate(plan.groups):
        groups.append(_group_lines(plan, group, first=index == 0))
    sbatch_lines = "\n#SBATCH hetjob\n".join("\n".join(lines) for lines in groups)
    setup = "".join(f"{line}\n" for line in plan.setup)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in plan.env)
    trap, check = _requeue_lines(plan)
    return Template(text).substitute(
        version=version,
        command=command,
        name=plan.experiment,
        run_dir=shlex.quote(plan.run_dir),
        sbatch_lines=sbatch_lines,
        setup_lines=setup,
        export_lines=exports,
        ntasks=plan.ntasks,
        srun_lines=srun_lines(plan),
        batch_python=batch_words(plan),
        requeue_trap=trap,
        requeue_check=check,
    )


def render_groups(plan: Plan, command: str, version: str = srl_hpc.__version__) -> list[tuple[str, str]]:
    """`slurm.layout: jobs`: (group, script) for each group, in task order: an ordinary job of its own
    (job_templates/group.sbatch, or slurm.template) running one srun of its tasks and the group watch."""
    text = Path(plan.template).expanduser().read_text() if plan.template else (TEMPLATES / "group.sbatch").read_text()
    scripts = []
    for index, g in enumerate(plan.groups):
        first = plan.first_task(g)
        lines = _group_lines(plan, g, first=True, job_name=f"{plan.job_name}-{g.name}")
        try:
            scripts.append(
                (
                    g.name,
                    Template(text).substitute(
                        version=version,
                        command=command,
                        name=plan.experiment,
                        run_dir=shlex.quote(plan.run_dir),
                        group=g.name,
                        index=index + 1,
                        jobs=len(plan.groups),
                        first_task=first,
                        last_task=first + g.ntasks - 1,
                        ntasks=g.ntasks,
                        sbatch_lines="\n".join(lines),
                        setup_lines="".join(f"{line}\n" for line in plan.setup),
                        export_lines="".join(f"export {k}={shlex.quote(v)}\n" for k, v in plan.env),
                        srun_line=group_srun_line(plan, g),
                        batch_python=batch_words(plan, g),
                    ),
                )
            )
        except KeyError as e:  # a het job's template (its ${srun_lines}) given for this layout
            raise PlanError(
                [
                    f"slurm.template {plan.template}: ${{{e.args[0]}}} is not a variable of a group's "
                    f"script (slurm.layout: jobs takes a template like job_templates/group.sbatch; "
                    f"job_templates/README.md lists its variables)"
                ]
            ) from None
    return scripts


def every_script(scripts: list[tuple[str, str]]) -> str:
    """The jobs layout's scripts one after another, each under a line naming its file, for --dry-run."""
    return "".join(f"# ---- {script_name(group)} (group {group})\n{text}" for group, text in scripts)


def script_name(group: str) -> str:
    """The file a group's script is kept in, in the run directory (the hetjob layout's is job.sbatch)."""
    return f"job-{group}.sbatch"


def srun_lines(plan: Plan) -> str:
    """One srun, one line per het group (`:` between them): each with its own CPUs, tasks per node and
    memory, since srun no longer takes them from sbatch (Slurm 22.05), and with the worker's command."""
    lines = []
    for index, g in enumerate(plan.groups):
        options = [f"--het-group={index}", f"--mpi={plan.mpi}", *_task_options(plan, g)]
        lines.append(" ".join(options) + " \\\n        " + _words(worker_command(plan, g)))
    return "srun " + " \\\n    : ".join(lines)


def group_srun_line(plan: Plan, g: HetGroup) -> str:
    """The jobs layout's srun of one group: no MPI (it cannot span jobs: the workers meet through files), the
    group's CPUs, tasks per node and memory as in the het job's line; a group of actors on several nodes goes on
    without the tasks of a node that fails (--no-kill, as its job)."""
    options = ["--mpi=none", *(["--no-kill"] if _shrinks(g) else []), *_task_options(plan, g)]
    return "srun " + " ".join(options) + " \\\n    " + _words(worker_command(plan, g))


def _shrinks(g: HetGroup) -> bool:
    """A job of actors on several nodes, in the jobs layout: one of its nodes lost, the job goes on without it."""
    return g.only_actors and g.nodes > 1


def _task_options(plan: Plan, g: HetGroup) -> list[str]:
    """A group's srun options: its CPUs, tasks per node and memory, since srun no longer takes them from sbatch
    (Slurm 22.05), slurm.srun_options and the container's."""
    options = [f"--cpus-per-task={g.cpus_per_task}", *_threads_per_core(plan)]
    if g.rider:  # one task more than the allocation holds, sharing the first node's CPUs
        options += [f"--ntasks={g.ntasks}", "--overcommit"]
    elif g.ntasks == g.nodes * g.tasks_per_node and not g.overcommit:  # else ignored: the allocation decides
        options.append(f"--ntasks-per-node={g.tasks_per_node}")
    return options + [f"--mem={g.mem_mb}M", *plan.srun_options, *pyxis_options(plan.container, plan.run_dir)]


def worker_command(plan: Plan, g: HetGroup) -> list[str]:
    """What srun starts for each task of a group: the node setup, the container, python, the worker. In the
    jobs layout each group's tasks count from 0: the worker adds the group's first task id."""
    jobs = plan.layout == "jobs"
    rendezvous = "file" if plan.mpi == "none" or jobs else "mpi"
    command = [
        *exec_prefix(plan.container, plan.run_dir, g.gpus_per_node > 0),
        *shlex.split(plan.python),
        "-m",
        "srl_hpc.worker",
        "--run-dir",
        plan.run_dir,
        "--slurm",
        "--rendezvous",
        rendezvous,
        *(["--first-task", str(plan.first_task(g))] if jobs else []),
        "--log-dir",
        f"{plan.run_dir}/logs",
    ]
    if plan.node_setup:  # on the worker's own node, before it starts; its arguments stay words
        script = "; ".join([*plan.node_setup, 'exec "$@"'])
        command = ["bash", "-c", script, "node_setup", *command]
    return command


def exec_prefix(c: ContainerConfig | None, run_dir: str, gpus: bool) -> list[str]:
    """`apptainer exec ...` (or singularity's) before python, the run directory bound; pyxis works through
    srun options instead (pyxis_options)."""
    if c is None or c.runtime == "pyxis":
        return []
    binds = [*c.binds, run_dir]
    return [c.runtime, "exec", *(["--nv"] if gpus else []), "--bind", ",".join(binds), *c.options, c.image]


def pyxis_options(c: ContainerConfig | None, run_dir: str) -> list[str]:
    if c is None or c.runtime != "pyxis":
        return []
    mounts = [*c.binds, f"{run_dir}:{run_dir}"]
    return [f"--container-image={c.image}", f"--container-mounts={','.join(mounts)}", *c.options]


def batch_python(plan: Plan, group: HetGroup | None = None) -> list[str]:
    """Python for the batch script's own steps (attempts, continuations, the srun guard, the group watch): in
    the container where the workers run in one of apptainer's (on the group's node: its first group's in a het
    job). Pyxis starts only srun's steps in its container, so there they run on the host, with the python that
    runs srl-launch (slurm.python names the image's)."""
    if plan.container is not None and plan.container.runtime == "pyxis":
        return [plan.launcher_python]
    prefix = exec_prefix(plan.container, plan.run_dir, (group or plan.groups[0]).gpus_per_node > 0)
    return [*prefix, *shlex.split(plan.python)]


def batch_words(plan: Plan, group: HetGroup | None = None) -> str:
    """batch_python as shell words, for a line of the script."""
    return _words(batch_python(plan, group))


def _threads_per_core(plan: Plan) -> list[str]:
    """slurm.threads_per_core on each group's #SBATCH lines and its srun line (srun takes no CPU options
    from sbatch since Slurm 22.05)."""
    return [] if plan.threads_per_core is None else [f"--threads-per-core={plan.threads_per_core}"]


def _words(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _requeue_lines(plan: Plan) -> tuple[str, str]:
    """With slurm.requeue: on Slurm's signal the run stops cleanly (SIGTERM to every task: the trainer
    checkpoints), then the job requeues itself while it has requeues left. A run that ended by itself as
    the signal came (its summary says succeeded or failed) is not requeued, and its outcome is the job's."""
    if plan.requeue is None:
        return "", ""
    _, max_requeues = plan.requeue
    trap = (
        "# slurm.requeue: Slurm sends USR1 to this script before the time limit (--signal=B:USR1@N)\n"
        "requeue=0\n"
        'on_time_limit() { requeue=1; scancel --signal=TERM "$SLURM_JOB_ID"; }\n'
        "trap on_time_limit USR1\n"
    )
    run_dir = shlex.quote(plan.run_dir)
    check = (
        f"outcome=$({batch_words(plan)} -m srl_hpc.rundir {run_dir} --outcome)\n"
        f'case "$outcome" in  # a run that ended by itself as the signal came is done: its outcome is the job\'s\n'
        f"    succeeded) exit 0 ;;\n"
        f"    failed) exit 1 ;;\n"
        f"esac\n"
        f'if [ "$requeue" = 1 ] && [ "$(( SLURM_RESTART_COUNT + 0 ))" -lt {max_requeues} ]; then\n'
        f'    scontrol requeue "$SLURM_JOB_ID"  # runs this script again: the next attempt resumes\n'
        f"fi\n"
    )
    return trap, check


def _group_lines(plan: Plan, g: HetGroup, first: bool, job_name: str | None = None) -> list[str]:
    lines = [f"# group {g.name}: {', '.join(compact(g.workers))}"]
    if first:  # job-wide options live in the first group
        lines += [
            f"#SBATCH --job-name={job_name or plan.job_name}",
            "# the batch script's own output; each worker logs to logs/<worker>.log",
            f"#SBATCH --output={plan.run_dir}/slurm-%j.out",
            f"#SBATCH --chdir={plan.run_dir}",
        ]
        if plan.requeue:
            lines += [
                "# slurm.requeue: signalled before the time limit, the run checkpoints and requeues itself",
                "#SBATCH --requeue",
                f"#SBATCH --signal=B:USR1@{plan.requeue[0]}",
            ]
        if plan.layout == "jobs":
            lines += [
                "# a group's job requeued alone (a node failure) would meet none of the others",
                "#SBATCH --no-requeue",
            ]
            if _shrinks(g):
                lines += [
                    "# a node of this job lost: the job and its srun go on without it, and the run without its",
                    "# actors while workers.actor.min_alive of them remain (losing the batch node ends the job)",
                    "#SBATCH --no-kill",
                ]
    lines.append(f"#SBATCH --time={plan.time}")
    if g.partition:
        lines.append(f"#SBATCH --partition={g.partition}")
    if g.account or plan.account:
        lines.append(f"#SBATCH --account={g.account or plan.account}")
    if g.qos or plan.qos:
        lines.append(f"#SBATCH --qos={g.qos or plan.qos}")
    if g.rider:
        lines.append(f"# {g.rider} rides along without CPUs of its own: srun starts one task more (--overcommit)")
    lines += [f"#SBATCH --nodes={g.nodes}", f"#SBATCH --ntasks={g.allocated_tasks}"]
    # (Slurm refuses more tasks per node than CPUs even with --overcommit; with one node and a rider, srun would
    # warn that its one task more does not match it)
    if not g.overcommit and not (g.rider and g.nodes == 1):
        lines += [
            "# at most this many per node: the nodes fill in order (launcher.plan.HetGroup.layout)",
            f"#SBATCH --ntasks-per-node={g.tasks_per_node}",
        ]
    lines += [
        f"#SBATCH --cpus-per-task={g.cpus_per_task}",
        *(f"#SBATCH {option}" for option in _threads_per_core(plan)),
        f"# memory per node: {g.tasks_per_node} task(s) x mem_per_task"
        + (" + slurm.controller_mem" if g.rider else ""),
        f"#SBATCH --mem={g.mem_mb}M",
    ]
    if g.gpus_per_node:
        lines += [
            "# a GPU per CUDA worker on a node (each takes the next: srl_hpc.graph.Graph.gpu_index)",
            f"#SBATCH --gres=gpu:{g.gpus_per_node}",
        ]
    if g.constraint:
        lines.append(f"#SBATCH --constraint={g.constraint}")
    lines += [f"#SBATCH {option}" for option in (*plan.sbatch_options, *g.sbatch_options)]
    return lines
