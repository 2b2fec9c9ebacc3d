"""Executors without SLURM: cluster profiles, job shapes, the submitit-local and debug
executors on a tiny grid, job records, scheduler-state parsing and merging, and a submission
that sbatch refuses (a stand-in sbatch)."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.cluster import ClusterProfile, JobShape, load_profile, parse_profile
from benchmark.errors import ProtobenchError
from slurm.executors import group_by_shape, job_spec, make_executor, submit_runs, wait_for
from benchmark.grid import cache_group, parse_grid
from benchmark.run.states import ATTEMPT_FILE, JobRecord, add_job_record, job_records, merge_state
from slurm.scheduler import JobState, parse_sacct, parse_scontrol
from benchmark.run.store import RunDir, atomic_write_json
from methods.registry import stand_in_method
from support import HELPERS
from tiny_grid import tiny_grid, write_tiny_grid

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "slurm" / "profiles"


# ---- cluster profiles -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["local", "example"])
def test_shipped_profiles_load(name: str) -> None:
    profile = load_profile(PROFILES / f"{name}.toml")
    assert profile.name == name and profile.shape.gpus_per_node >= 1
    params = profile.shape.submitit_parameters()
    assert {"gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min"} <= set(params)


def test_local_profile_matches_the_test_cluster() -> None:
    profile = load_profile(PROFILES / "local.toml")
    assert profile.shape.partition == "debug" and profile.shape.gpus_per_node == 1 and profile.device == "cpu"


def test_backbone_overrides_give_their_runs_another_shape(tmp_path: Path) -> None:
    profile = load_profile(PROFILES / "example.toml")
    grid = parse_grid({"name": "g", "defaults": {"dataset": "synthbirds", "data_root": "x", "method": "vmfproto"},
                       "sweep": [{"backbone": ["dinov2_vits14", "dinov2_vitb14", "dinov3_vitb16"],
                                  "prototypes_per_class": [3, 5]}]}, source="t")
    groups = group_by_shape(list(grid.runs), profile)
    assert [len(specs) for _, specs in groups] == [4, 2]  # ViT-B runs (480 min) | ViT-S runs (240 min)
    by_shape = {shape.timeout_min: specs for shape, specs in groups}
    assert {s.backbone for s in by_shape[480]} == {"dinov2_vitb14", "dinov3_vitb16"}
    assert {s.backbone for s in by_shape[240]} == {"dinov2_vits14"}
    for _, specs in groups:  # neighbours share token caches
        assert [cache_group(s) for s in specs] == sorted(cache_group(s) for s in specs)
    assert len(group_by_shape(list(grid.runs), ClusterProfile())) == 1


@pytest.mark.parametrize("text, needle", [
    ("partitoin = 'gpu'", "unknown key 'partitoin' in profile p.toml (did you mean 'partition'?)"),
    ("[backbone.dinov2_vitb14]\ntime = 5", "unknown key 'time' in profile p.toml [backbone.dinov2_vitb14]"),
    ("[backbone.resnet50]\ntimeout_min = 5", "[backbone.resnet50] names no backbone"),
    ("gpus_per_node = '1'", "gpus_per_node = '1' must be of type int"),
    ("cpus_per_task = 0", "cpus_per_task = 0 must be ≥ 1"),
    ("snapshot = 1", "snapshot = 1 must be of type bool"),
    ("device = 'tpu'", "device = 'tpu' must be 'auto', 'cpu' or 'cuda[:N]'"),
    ("setup = ['module load x', 3]", "setup must be a list of shell lines"),
    ("timeout_min = 2\nsignal_delay_s = 120", "timeout_min = 2 is not longer than signal_delay_s = 120"),
    ("[backbone.dinov2_vitb14]\ntimeout_min = 1",
     "p.toml [backbone.dinov2_vitb14]: timeout_min = 1 is not longer than signal_delay_s = 120"),
    ("timeout_min = [", "is not valid TOML"),
])
def test_profile_mistakes_are_one_clear_error_naming_key_and_file(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text + "\n")
    with pytest.raises(ProtobenchError) as err:
        load_profile(path)
    assert needle.replace("p.toml", str(path)) in str(err.value)


def test_missing_profile_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match="does not exist"):
        load_profile(tmp_path / "nope.toml")


def test_profile_becomes_submitit_parameters() -> None:
    profile = parse_profile({"partition": "gpu", "account": "a", "setup": ["module load cuda"],
                             "sbatch": {"gres": "gpu:a100:1"}, "signal_delay_s": 60}, source="s", name="s")
    assert profile.shape == JobShape(partition="gpu", account="a")
    assert profile.shape.submitit_parameters()["slurm_partition"] == "gpu"
    assert "slurm_qos" not in profile.shape.submitit_parameters()
    assert profile.slurm_parameters() == {"slurm_signal_delay_s": 60, "slurm_array_parallelism": 32,
                                          "slurm_setup": ["module load cuda"],
                                          "slurm_additional_parameters": {"gres": "gpu:a100:1"}}


# ---- submitit executors ---------------------------------------------------------------------
@pytest.mark.parametrize("executor, cluster", [("submitit-local", "local"), ("debug", "debug"), ("slurm", "slurm")])
def test_executors_name_the_cluster_explicitly(tmp_path: Path, executor: str, cluster: str) -> None:
    if cluster == "slurm" and not shutil.which("srun"):
        pytest.skip("srun not found: submitit's SLURM executor refuses to start without it")
    assert make_executor(executor, tmp_path, ClusterProfile(), "job").cluster == cluster


def test_slurm_executor_without_slurm_commands_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no srun
    with pytest.raises(ProtobenchError, match=r"--executor slurm needs SLURM's commands \(sbatch, srun\) on PATH"):
        make_executor("slurm", tmp_path, ClusterProfile(), "job")


def test_paths_are_absolute_from_the_grid_on_and_job_spec_keeps_the_run_id(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tiny_grid("g", Path("data/synth")).runs[0]
    assert spec.data_root == str(tmp_path / "data" / "synth")
    assert spec.run_id == spec.with_overrides(data_root="data/synth").run_id
    monkeypatch.chdir("/")  # as a job does, in its code snapshot
    moved = job_spec(spec, "cuda")
    assert moved.data_root == str(tmp_path / "data" / "synth") and moved.device == "cuda"
    assert moved.run_id == spec.run_id


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["debug", "submitit-local"])
def test_submitit_executors_run_a_tiny_grid(tmp_path: Path, executor: str) -> None:
    grid = tiny_grid("tiny", tmp_path / "data", js=(2, 3) if executor == "debug" else (2,))
    runs_root = tmp_path / "runs"
    submission = submit_runs(grid, list(grid.runs), runs_root, tmp_path / "cache", executor=executor,
                             profile=ClusterProfile())
    assert len(submission.arrays) == 1 and submission.snapshot is None
    assert [o.state for o in wait_for(submission)] == ["done"] * len(grid.runs)
    for spec in grid.runs:
        rd = RunDir(grid.run_dir(runs_root, spec))
        assert rd.result()["run_id"] == spec.run_id
        (record,) = job_records(rd.path)
        assert record.executor == executor and record.submitit_folder == str(submission.folder)
        assert record.array_job_id == "" and record.array_task_id is None
        assert (rd.path / ATTEMPT_FILE).exists()
    again = submit_runs(grid, list(grid.runs), runs_root, tmp_path / "cache", executor=executor,
                        profile=ClusterProfile())
    assert again.arrays == [] and {o.state for o in again.settled} == {"skipped"}


def test_slurm_executor_needs_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = REPO / "benchmark" / "grids" / "demo.toml"
    assert main(["run", str(grid), "--executor", "slurm", "--runs-dir", str(tmp_path)]) == 2
    assert "--executor slurm needs --profile" in capsys.readouterr().err


# ---- job records and states -----------------------------------------------------------------
def record(job_id: str = "7_1", executor: str = "slurm") -> JobRecord:
    return JobRecord(executor=executor, job_id=job_id, submitted="t", submitit_folder="/f", array_job_id="7",
                     array_task_id=1)


def test_job_records_accumulate_per_submission(tmp_path: Path) -> None:
    add_job_record(tmp_path, record("7_1"))
    add_job_record(tmp_path, record("9_0"))
    assert [r.job_id for r in job_records(tmp_path)] == ["7_1", "9_0"]
    assert record().log_paths == (Path("/f/7_1_0_log.out"), Path("/f/7_1_0_log.err"))


def test_scontrol_output_is_read_per_array_task() -> None:
    text = (
        "JobId=1 ArrayJobId=1 ArrayTaskId=2-3%2 JobState=PENDING Reason=JobArrayTaskLimit Restarts=0 ExitCode=0:0\n"
        "JobId=2 ArrayJobId=1 ArrayTaskId=0 JobState=PENDING Reason=BeginTime Restarts=1 ExitCode=0:0\n"
        "JobId=3 ArrayJobId=1 ArrayTaskId=1 JobState=CANCELLED Reason=None Restarts=0 ExitCode=0:15\n"
        "JobId=8 JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0\n"
    )
    jobs = {j.job_id: j for j in parse_scontrol(text)}
    assert set(jobs) == {"1_0", "1_1", "1_2", "1_3", "8"}
    assert jobs["1_0"].restarts == 1 and jobs["1_0"].live
    assert jobs["1_1"] == JobState("1_1", "CANCELLED", "", 0) and not jobs["1_1"].live
    assert jobs["1_3"].reason == "JobArrayTaskLimit"
    assert [j.job_id for j in parse_scontrol("JobId=5 ArrayJobId=5 ArrayTaskId=1,4-5,6-10:4 JobState=PENDING")] == \
        ["5_1", "5_4", "5_5", "5_6", "5_10"]


def test_sacct_output_skips_steps_and_reads_states() -> None:
    text = "12_0|COMPLETED\n12_0.batch|COMPLETED\n12_1|CANCELLED by 0\n12_[2-3]|PENDING\n"
    assert [(j.job_id, j.state) for j in parse_sacct(text)] == [("12_0", "COMPLETED"), ("12_1", "CANCELLED")]


def test_merged_states_of_a_run(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    job = record()
    assert merge_state(rd, None, None).label == "new"
    assert merge_state(rd, job, JobState("7_1", "PENDING")).label == "pending"
    state = merge_state(rd, job, JobState("7_1", "RUNNING", restarts=2))
    assert state.label == "running, requeued 2×" and state.live and not state.failed
    for slurm_state in ("CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT"):
        state = merge_state(rd, job, JobState("7_1", slurm_state))
        assert state.label == f"failed ({slurm_state})" and state.failed and not state.live
    assert merge_state(rd, job, JobState("7_1", "FAILED", "NonZeroExitCode")).label == "failed (FAILED, NonZeroExitCode)"
    assert merge_state(rd, job, None).label.startswith("failed (job 7_1 ended without a result")
    atomic_write_json(rd.failure_path, {"reason": "ValueError: x"})
    assert merge_state(rd, job, JobState("7_1", "FAILED")).label == "failed"
    assert merge_state(rd, job, JobState("7_1", "PENDING")).live  # a retried run: the scheduler wins
    atomic_write_json(rd.result_path, {"run_id": "x"})
    assert merge_state(rd, job, JobState("7_1", "CANCELLED")).label == "done"
    local = merge_state(RunDir(tmp_path / "other"), record("123", executor="submitit-local"), None)
    assert local.label == "new" and not local.live and not local.failed




# ---- submission refused by SLURM (a stand-in sbatch on PATH; the real refusal is in test_slurm) ----
FAKE_SBATCH = """#!/bin/sh
# answers as sbatch does: refuses a job for partition "nope", queues any other as job 4242
if grep -q -- '--partition=nope' "$1"; then
  echo 'sbatch: error: invalid partition specified: nope' >&2
  echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2
  exit 1
fi
echo 'Submitted batch job 4242'
"""


@pytest.fixture
def fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "fake-slurm"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", "#!/bin/sh\nexit 1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def leftovers(submitit_dir: Path) -> list[Path]:
    """submitit's files of a submission that never got a job id: <uuid>.pkl, .submission_file_<uuid>.sh."""
    return [p for p in submitit_dir.rglob("*") if not p.is_symlink() and p.is_file()
            and (re.fullmatch(r"[0-9a-f]{32}\.pkl", p.name) or p.name.startswith(".submission_file_"))]


needs_checkout = pytest.mark.skipif(not (REPO / ".git").exists() or not shutil.which("git"),
                                    reason="the code snapshot needs the suite's git checkout")


@needs_checkout
def test_refused_submission_is_one_message_quoting_sbatch(tmp_path: Path, fake_sbatch: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    write_tiny_grid(tmp_path / "grid.toml", "refused", tmp_path / "data", sweep=[{"prototypes_per_class": [2, 3]}])
    (tmp_path / "nope.toml").write_text('partition = "nope"\ndevice = "cpu"\n')
    runs = tmp_path / "runs"
    assert main(["run", str(tmp_path / "grid.toml"), "--executor", "slurm", "--profile", str(tmp_path / "nope.toml"),
                 "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("protobench: error: submitting the job array of 2 run(s) (partition nope;")
    assert err.count("sbatch: error: invalid partition specified: nope\n") == 1  # not printed again by submitit
    assert "Batch job submission failed: Invalid partition name specified" in err and "Traceback" not in err
    assert f"fix the cluster profile {tmp_path / 'nope.toml'}" in err
    assert not list(runs.rglob("job.json")) and not list(runs.rglob("spec.json"))  # no run recorded as queued
    assert not any((runs / ".snapshots").iterdir())  # no job will import it
    assert leftovers(runs / ".submitit") == []


@needs_checkout
def test_a_refused_second_array_keeps_the_first_one_recorded(tmp_path: Path, fake_sbatch: None) -> None:
    grid = tiny_grid("half", tmp_path / "data", js=(2, 3), backbones=("dinov2_vitb14", "dinov2_vits14"))
    profile = parse_profile({"partition": "debug", "device": "cpu", "backbone": {"dinov2_vits14": {"partition": "nope"}}},
                            source="half.toml", name="half")
    runs = tmp_path / "runs"
    with pytest.raises(ProtobenchError) as refused:
        submit_runs(grid, list(grid.runs), runs, tmp_path / "cache", executor="slurm", profile=profile)
    assert "Invalid partition name specified" in str(refused.value)
    assert "1 earlier array(s) were queued and recorded (job 4242)" in str(refused.value)
    for spec in grid.runs:
        records, rd = job_records(grid.run_dir(runs, spec)), RunDir(grid.run_dir(runs, spec))
        if spec.backbone == "dinov2_vitb14":  # the first array (ViT-B sorts first): queued and recorded
            assert [r.job_id for r in records] in (["4242_0"], ["4242_1"]) and rd.spec_path.exists()
        else:  # the refused array: nothing recorded
            assert records == [] and not rd.spec_path.exists()
    (snap,) = (runs / ".snapshots").iterdir()  # kept: the queued jobs import it
    assert (snap / "slurm" / "executors.py").is_file()
    assert leftovers(runs / ".submitit") == []


def test_adapter_paths_are_the_absolute_entries_own_adapters_were_imported_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm.jobs import adapter_paths

    package = tmp_path / "contrib" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(HELPERS / "example_adapter.py", package / "adapters.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("contrib")  # relative, as PYTHONPATH=contrib puts it
    grid = tiny_grid("g", tmp_path / "data")
    specs = [grid.runs[0].with_overrides(method=m) for m in ("mypkg.adapters:CosinePrototypes", "vmfproto",
                                                             "example_adapter:CosinePrototypes")]
    for spec in specs:  # what the pre-submit checks do
        stand_in_method(spec.method, {}, 2)
    assert adapter_paths(specs) == (tmp_path / "contrib", HELPERS)
    trunks = tmp_path / "trunks"
    trunks.mkdir()
    shutil.copy(HELPERS / "example_trunk.py", trunks / "lab_trunk.py")
    monkeypatch.syspath_prepend("trunks")
    own_trunk = grid.runs[0].with_overrides(backbone="lab_trunk:tiny_vit")  # a trunk by import path too
    assert adapter_paths([own_trunk]) == (trunks,)
