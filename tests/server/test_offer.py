"""The server's offer: what this hardware and these limits let a learner pick, the job each page submits (each
within the limits), and the one door every job comes through."""

import time

import pytest

from server.offer import (
    BATCH_SIZES,
    COMPARED_PRECISIONS,
    MEMORY_SWEEP_BATCH_SIZES,
    SAFEGUARD_SHRINKS,
    SAFEGUARD_SIZES,
    SWEEP_MIN_STEADY_S,
    ComparisonRequest,
    Offer,
    log_every,
)
from server.records import MAX_COMPARE_PAIRS, MAX_LABEL_CHARS, JobSpec
from server.settings import Settings
from trainer.capabilities import DeviceFacts, mode_support
from trainer.config import RunConfig
from trainer.errors import ConfigError, UnsupportedModeError

CPU = mode_support(DeviceFacts("cpu"))
AMPERE = mode_support(DeviceFacts("cuda", "8.0", native_bf16=True))
VOLTA = mode_support(DeviceFacts("cuda", "7.0"))


def offer(support=CPU, recommended="amp-bf16", presets=None, **limits) -> Offer:
    return Offer(Settings(**limits), support, recommended=recommended, presets=presets)


def request(**changes) -> ComparisonRequest:
    base = dict(epochs=5, batch_size=256, precision="amp-bf16", data="synthetic", loader="dataloader", width=1,
                channels_last=False, breakdown=False, subset=None)
    return ComparisonRequest(**{**base, **changes})


def test_the_precisions_offered_depend_on_the_hardware():
    assert offer(CPU).compared_precisions()[0] == ("amp-fp16", "amp-bf16")
    assert "tf32" in offer(CPU).compared_precisions()[1]
    assert offer(AMPERE).compared_precisions() == (("amp-fp16", "amp-bf16", "tf32", "fp32-default"), {})
    offered, missing = offer(VOLTA, recommended="amp-fp16").compared_precisions()
    assert offered == ("amp-fp16",)
    assert set(missing) == {"amp-bf16", "tf32", "fp32-default"} and "7.0" in missing["tf32"]


def test_fp32_default_is_offered_only_where_it_differs_from_fp32():
    offered, missing = offer(CPU).compared_precisions()
    assert "fp32-default" not in offered and "computes exactly as fp32 on a CPU" in missing["fp32-default"]
    spec = offer(AMPERE).comparison(request(precision="fp32-default"))
    assert [run.precision for run in spec.runs] == ["fp32", "fp32-default"]
    spec.check_shape()


def test_choices_follow_the_instructors_limits():
    choices = offer(max_epochs=3, max_batch_size=1000, max_subset=5000).choices()
    assert choices["epochs"].allowed == (1, 2, 3) and choices["epochs"].default == 3
    assert choices["batch_size"].allowed == BATCH_SIZES[:5] and choices["batch_size"].default == 256
    assert choices["subset"].allowed == (256, 512, 1024, 2048, 5000) and choices["subset"].default == 5000
    assert choices["data"].allowed == ("synthetic",)  # no CIFAR-10 in ./data here


@pytest.mark.parametrize(
    "limits",
    [{"max_epochs": 1}, {"max_batch_size": 1}, {"max_batch_size": 16}, {"max_batch_size": 100}, {"max_subset": 1},
     {"max_subset": 300}, {"max_epochs": 1, "max_batch_size": 16, "max_subset": 100}],
    ids=lambda limits: ",".join(f"{k}={v}" for k, v in limits.items()),
)
def test_every_choice_offered_under_any_limit_is_admitted_by_the_door(limits):
    strict = offer(**limits)
    start = {param: choice.default for param, choice in strict.choices().items()}
    for param in ("epochs", "batch_size", "subset"):
        for allowed in strict.choices()[param].allowed:
            strict.admit(strict.comparison(ComparisonRequest.of({**start, param: allowed})))
    for spec in (strict.quick_demo(), strict.tiny_fp16_run(), strict.scaler_ablation()):
        strict.admit(spec)
    assert strict.batch_sizes(MEMORY_SWEEP_BATCH_SIZES)  # never empty: the limit itself where none fits


def test_default_choices_are_the_labs_settings(tmp_path, cifar10_writer):
    cifar10_writer(tmp_path)
    choices = Offer(Settings(data_root=str(tmp_path)), AMPERE, recommended="amp-bf16").choices()
    assert choices["epochs"].allowed == tuple(range(1, 21)) and choices["epochs"].default == 5
    assert choices["batch_size"].allowed[0] == 32 and choices["batch_size"].allowed[-1] == 4096
    assert choices["batch_size"].default == 256
    assert choices["data"].default == "cifar10" and choices["loader"].default == "dataloader"
    assert choices["subset"].default is None
    assert choices["precision"].default == "amp-bf16" and choices["precision"].old_param == "amp"


def test_presets_set_the_start_and_those_not_offered_are_named():
    preset = offer(presets={"epochs": "2", "batch_size": "64", "width": "3"}, max_epochs=3)
    start = preset.start()
    assert (start.epochs, start.batch_size, start.width) == (2, 64, 1)
    assert preset.preset_problems() == ["the preset width='3' is not offered here (1, 2, 4, 8)"]


def test_fp16_on_a_cpu_is_blocked_without_a_small_subset_with_one_message():
    blocked = offer(CPU).blocking_reasons(request(precision="amp-fp16"))
    assert blocked == ["amp-fp16 on a CPU without AMX-FP16 units (most CPUs) is tens of times slower than fp32, so "
                       "this server runs it only on at most 5,000 training images: pick a smaller subset, or amp-bf16"]
    assert not offer(CPU).blocking_reasons(request(precision="amp-fp16", subset=2048))
    assert not offer(AMPERE).blocking_reasons(request(precision="amp-fp16"))
    with pytest.raises(ConfigError) as refused:  # the door says the same
        offer(CPU).admit(offer(CPU).comparison(request(precision="amp-fp16")))
    assert str(refused.value) == blocked[0]


def test_the_run_button_submits_fp32_then_the_chosen_mode_with_equal_settings():
    spec = offer().comparison(request(precision="amp-bf16", subset=2048, batch_size=128, epochs=2, loader="resident"))
    assert spec.kind == "compare"
    fp32, amp = spec.runs
    assert (fp32.precision, amp.precision) == ("fp32", "amp-bf16")
    fp32_rest = {k: v for k, v in fp32.to_dict().items() if k != "precision"}
    assert fp32_rest == {k: v for k, v in amp.to_dict().items() if k != "precision"}
    assert fp32.test_subset == 1000 and fp32.subset == 2048
    assert spec.label.startswith("fp32 vs amp-bf16, 2 epochs, batch 128")
    assert fp32.measure_peaks and amp.measure_peaks  # for the step budget on Results
    spec.check_shape()


def test_a_request_with_a_name_that_is_not_a_choice_is_refused():
    with pytest.raises(ConfigError, match="unknown choice 'amp' for a comparison"):
        ComparisonRequest.of({"amp": "amp-bf16"})


def test_log_every_gives_about_a_hundred_loss_points_but_never_fewer_than_the_lab():
    assert log_every(None, 256, 5) == 10
    assert log_every(256, 64, 1) == 1
    assert log_every(None, 32, 20) == 100


def test_the_quick_demo_is_small_and_uses_the_recommended_mode():
    spec = offer().quick_demo()
    assert [run.precision for run in spec.runs] == ["fp32", "amp-bf16"]
    assert all(run.epochs == 1 and run.data == "synthetic" and run.subset <= 5000 for run in spec.runs)
    assert offer(VOLTA, recommended="amp-fp16").quick_demo().runs[1].precision == "amp-fp16"
    assert spec.label.startswith("quick demo")


def test_the_quick_demo_and_the_fp16_runs_stay_within_a_strict_servers_limits():
    strict = offer(max_batch_size=16, max_subset=300, max_epochs=1)
    demo = strict.admit(strict.quick_demo())
    assert (demo.runs[0].batch_size, demo.runs[0].subset) == (16, 300)
    tiny = strict.admit(strict.tiny_fp16_run()).runs[0]
    assert (tiny.precision, tiny.batch_size, tiny.subset) == ("amp-fp16", 16, 300)
    ablation = strict.admit(strict.scaler_ablation()).runs[0]
    assert ablation.loss_scale_init == 2.0**24 and ablation.loss_scale_growth_interval == 5


def test_repeats_alternate_the_pair_and_name_the_job():
    choices = offer().choices()
    assert choices["repeats"].allowed == tuple(range(1, MAX_COMPARE_PAIRS + 1)) and choices["repeats"].default == 1
    one = offer().comparison(request(repeats=1))
    three = offer().comparison(request(repeats=3, subset=2048))
    assert [run.precision for run in three.runs] == ["fp32", "amp-bf16"] * 3
    assert three.runs[2:4] == three.runs[:2] and three.runs[0] is not three.runs[2]  # equal settings, own objects
    assert three.label.startswith("fp32 vs amp-bf16 x3, 5 epochs") and "x3" not in one.label
    three.check_shape()
    longest = request(precision=max(COMPARED_PRECISIONS, key=len), epochs=20, batch_size=4096, channels_last=True,
                      repeats=MAX_COMPARE_PAIRS)
    assert len(offer(AMPERE).comparison(longest).label) <= MAX_LABEL_CHARS


def test_a_sweep_alternates_precisions_and_sizes_its_runs():
    spec = offer().sweep("amp-bf16", [256, 64], widths=[2, 1], steps_per_run=10)
    plan = spec.runs
    assert [(c.width, c.batch_size, c.precision) for c in plan] == [
        (1, 64, "fp32"), (1, 64, "amp-bf16"), (1, 256, "fp32"), (1, 256, "amp-bf16"),
        (2, 64, "fp32"), (2, 64, "amp-bf16"), (2, 256, "fp32"), (2, 256, "amp-bf16"),
    ]
    assert all(c.epochs == 1 and c.subset == 10 * c.batch_size and not c.breakdown for c in plan)
    assert all(c.min_steady_s == SWEEP_MIN_STEADY_S for c in plan)  # whole epochs added until that long
    assert all(c.loader == "resident" and c.data == "synthetic" for c in plan)
    assert spec.label == "sweep: fp32 vs amp-bf16, batch 64, 256, width 1, 2, resident" and not spec.probe_max_batch
    assert offer(AMPERE).sweep("amp-bf16", [64]).probe_max_batch  # a GPU also searches the largest batch


@pytest.mark.parametrize(
    "kwargs",
    [dict(batch_sizes=[32, 64, 128, 256, 512, 1024, 2048]), dict(batch_sizes=[64], precision="fp32"),
     dict(batch_sizes=[]), dict(batch_sizes=[64], steps_per_run=1)],
)
def test_a_sweep_the_server_cannot_take_is_refused_before_it_is_queued(kwargs):
    with pytest.raises(ConfigError):
        offer().sweep(**{"precision": "amp-bf16", **kwargs})


def test_a_sweep_or_breakdown_over_the_limits_is_said_before_it_is_queued():
    with pytest.raises(ConfigError, match="above this server's limit of 1000 training images"):
        offer(max_subset=1000).sweep("amp-bf16", [64], steps_per_run=20)
    with pytest.raises(ConfigError, match="above this server's limit of 1000 training images"):
        offer(max_subset=1000).breakdown("fp32", 64, steps=20)


def test_the_sweep_offers_only_the_amp_modes_on_a_tf32_gpu():
    assert "tf32" in offer(AMPERE).compared_precisions()[0]  # the comparison page offers it
    assert offer(AMPERE).sweep_precisions == ("amp-fp16", "amp-bf16")


def test_a_breakdown_runs_the_same_short_run_with_each_loader():
    spec = offer().breakdown("amp-bf16", 32, steps=2)
    assert spec.kind == "breakdown" and [c.loader for c in spec.runs] == ["dataloader", "resident"]
    assert all(c.breakdown and c.subset == 64 and c.precision == "amp-bf16" for c in spec.runs)
    assert spec.label == "where the time goes: DataLoader vs resident (amp-bf16, batch 32)"


def test_the_door_forces_the_instructors_folder_and_this_device_and_checks_every_run(tmp_path):
    door = Offer(Settings(data_root=str(tmp_path / "data"), max_epochs=3), CPU)
    admitted = door.admit(JobSpec("run", [RunConfig(device="cuda", data_root="/elsewhere", data="synthetic",
                                                    epochs=2)], label="  mine  "))
    (run,) = admitted.runs
    assert (run.device, run.data_root, admitted.label) == ("cpu", str(tmp_path / "data"), "mine")
    assert run.peaks_cache == str(door.settings.peaks_cache_path)  # the server's cache, not the learner's path
    with pytest.raises(ConfigError, match="4 epochs is above this server's limit of 3"):
        door.admit(JobSpec("run", [RunConfig(epochs=4, data="synthetic")]))
    with pytest.raises(UnsupportedModeError, match="tf32 needs an NVIDIA GPU"):
        door.admit(JobSpec("run", [RunConfig(precision="tf32", data="synthetic")]))
    with pytest.raises(ConfigError, match="unknown precision 'fp8'"):
        door.admit(JobSpec("run", [RunConfig(precision="fp8", data="synthetic")]))
    with pytest.raises(ConfigError, match="a compare job's baseline and candidate may differ only in precision"):
        door.admit(JobSpec("compare", [RunConfig(data="synthetic", epochs=1), RunConfig(data="synthetic", epochs=2)]))
    with pytest.raises(ConfigError, match="submit needs a JobSpec"):
        door.admit({"kind": "run"})


def test_the_door_refuses_values_over_the_limits():
    door = offer(max_epochs=5, max_batch_size=4096, max_subset=2000)
    door.check_limits(RunConfig(epochs=5, batch_size=4096, subset=2000))
    with pytest.raises(ConfigError, match="batch size 8192 is above this server's limit of 4096 set by the instructor"):
        door.check_limits(RunConfig(epochs=1, batch_size=8192, subset=100))
    with pytest.raises(ConfigError, match="6 epochs is above this server's limit of 5"):
        door.check_limits(RunConfig(epochs=6, subset=100))
    with pytest.raises(ConfigError, match="subset of 2001 images"):
        door.check_limits(RunConfig(epochs=1, subset=2001))
    with pytest.raises(ConfigError, match="whole training split"):
        door.check_limits(RunConfig(epochs=1, subset=None))


def test_the_door_forces_the_instructors_paths_and_leaves_the_learners_object_alone():
    learner = RunConfig(data_root="/etc", device="cuda", precision="amp-bf16")
    (admitted,) = Offer(Settings(data_root="/srv/data", device="cpu"), CPU).admit(JobSpec("run", [learner])).runs
    assert (admitted.data_root, admitted.device, admitted.precision) == ("/srv/data", "cpu", "amp-bf16")
    assert learner.data_root == "/etc"  # a copy; the learner's object is untouched


def test_a_gpu_whose_modes_are_not_known_yet_leaves_them_to_the_runs_own_process():
    door = Offer.for_device(Settings(), "cuda")
    assert door.support is None
    (run,) = door.admit(JobSpec("run", [RunConfig(precision="amp-bf16", data="synthetic")])).runs
    assert run.device == "cuda"  # a GPU without bf16 refuses it in the run's process, which can ask the GPU


@pytest.mark.slow
def test_one_submit_checks_a_runs_precision_three_times_at_most(tmp_path, monkeypatch):
    """A precision is checked at the server's door (its name and this device together), when the run's own process
    starts training (RunConfig.validate) and by the precision policy there: three times, not on every hop."""
    import json

    import trainer.config
    import trainer.precision
    from server.jobs import JobManager
    from trainer.isolated import RunOutcome
    from trainer.run import run_training

    checked = []

    def counted(precision, refused=None):
        checked.append(precision)
        return check_precision(precision, refused)

    check_precision = trainer.config.check_precision
    monkeypatch.setattr(trainer.config, "check_precision", counted)
    monkeypatch.setattr(trainer.precision, "check_precision", counted)

    def own_process(config, on_progress=None, **_):
        """What trainer.isolated's child does with the config it receives as a line of JSON, in this process."""
        received = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
        return RunOutcome(config, "ok", result=run_training(received, on_progress=on_progress))

    settings = Settings(state_dir=str(tmp_path), data_root=str(tmp_path), device="cpu")
    manager = JobManager(settings, runner=own_process, device_type="cpu").start()
    try:
        door = Offer.for_device(settings, "cpu")
        spec = door.comparison(ComparisonRequest(precision="amp-bf16", epochs=1, batch_size=32, data="synthetic",
                                                 loader="resident", subset=64))
        assert checked == []  # building the job checks nothing: the door does
        job_id = manager.submit("learner", spec)
        assert checked == ["fp32", "amp-bf16"]  # the door, once per run
        deadline = time.monotonic() + 60
        while not manager.get(job_id).finished and time.monotonic() < deadline:
            time.sleep(0.05)
        assert manager.get(job_id).status == "done"
    finally:
        manager.shutdown(wait=True, timeout=10)
    assert sorted(checked) == sorted(["fp32"] * 3 + ["amp-bf16"] * 3)


def test_the_presets_govern_the_quick_demo_and_the_sweeps_starting_choices():
    tight = offer(presets={"epochs": "1", "batch_size": "64", "subset": "1024", "precision": "amp-fp16",
                           "width": "2", "loader": "dataloader"})
    demo = tight.quick_demo().runs
    assert (demo[0].batch_size, demo[0].subset, demo[1].precision) == (64, 1024, "amp-fp16")  # never more
    assert demo[0].loader == "resident" and demo[0].data == "synthetic"  # still quick: data held on the device
    roomy = offer(presets={"epochs": "5", "batch_size": "1024", "subset": "all"}).quick_demo().runs[0]
    assert (roomy.epochs, roomy.batch_size, roomy.subset) == (1, 128, 5000)  # larger presets leave it small
    defaults = tight.sweep_defaults()
    assert defaults["batch_sizes"] == [64, 256, 1024] and defaults["widths"] == [2]
    assert defaults["loader"] == "dataloader"
    assert offer().sweep_defaults() == {"batch_sizes": [64, 256, 1024], "widths": [1], "loader": "resident",
                                        "steps": 20}
    assert offer(presets={"batch_size": "128"}).sweep_defaults()["batch_sizes"] == [64, 128, 256]


def test_each_kind_of_job_as_it_starts_and_a_comparison_read_back_from_its_job():
    jobs = offer(max_subset=1000).starting_jobs()
    # the sweep and breakdown go over 1000 images
    assert set(jobs) == {"quick-demo", "comparison", "tiny-fp16", "ablation", "safeguards"}
    assert {purpose: spec.purpose for purpose, spec in jobs.items()} == {purpose: purpose for purpose in jobs}
    asked = request(precision="amp-fp16", epochs=3, batch_size=64, subset=2048, width=2, channels_last=True,
                    repeats=3)
    assert ComparisonRequest.from_spec(offer().comparison(asked)) == asked


def test_each_safeguard_pair_is_amp_fp16_beside_its_failure_with_equal_settings():
    spec = offer().safeguard_demo("no-scaler", 12)
    guarded, failure = spec.runs
    assert (spec.kind, spec.purpose) == ("compare", "safeguards")
    assert (guarded.precision, failure.precision) == ("amp-fp16", "amp-fp16-unscaled")
    assert guarded.to_dict() | {"precision": "x"} == failure.to_dict() | {"precision": "x"}
    assert guarded.loss_shrink_log2 == 12 and guarded.track_updates and guarded.loader == "resident"
    assert (guarded.subset, guarded.batch_size, guarded.epochs) == tuple(SAFEGUARD_SIZES["cpu"].values())
    assert spec.label == "deliberate failure, without the GradScaler: amp-fp16 vs amp-fp16-unscaled, loss x 2^-12"
    pure = offer().safeguard_demo("no-master-weights", 16)
    assert [run.precision for run in pure.runs] == ["amp-fp16", "fp16-true"]
    assert all(run.loss_shrink_log2 == 0 for run in pure.runs)  # the weights' failure needs no help
    assert pure.label == "deliberate failure, without fp32 master weights: amp-fp16 vs fp16-true"
    assert offer().admit(spec).runs[1].precision == "amp-fp16-unscaled"  # its own lesson's door is open


def test_a_safeguard_pair_stays_within_a_strict_servers_limits_and_bad_choices_are_named():
    spec = offer(max_subset=500, max_batch_size=16, max_epochs=1).safeguard_demo("no-scaler")
    assert all((run.subset, run.batch_size, run.epochs) == (500, 16, 1) for run in spec.runs)
    gpu = Offer(Settings(device="cuda"), AMPERE).safeguard_demo("no-scaler")
    assert gpu.runs[0].batch_size == SAFEGUARD_SIZES["cuda"]["batch_size"]
    with pytest.raises(ConfigError, match="unknown safeguard 'no-autocast': choose one of no-scaler, no-master"):
        offer().safeguard_demo("no-autocast")
    with pytest.raises(ConfigError, match=r"the loss shrink is one of 2\^-0, 2\^-8, 2\^-12, 2\^-16, got 2\^-10"):
        offer().safeguard_demo("no-scaler", 10)
    assert SAFEGUARD_SHRINKS[0] == 0


@pytest.mark.parametrize("failure", ["amp-fp16-unscaled", "fp16-true"])
def test_the_deliberate_failures_are_refused_outside_their_lesson(failure):
    run = RunConfig(precision=failure, data="synthetic", subset=256, epochs=1, batch_size=32)
    with pytest.raises(ConfigError, match=f"{failure} is a deliberate failure: it runs only in the lesson on AMP"):
        offer().admit(JobSpec("run", [run]))
    with pytest.raises(ConfigError, match="deliberate failure"):
        offer().admit(JobSpec("compare", [RunConfig(data="synthetic", subset=256, epochs=1, batch_size=32), run],
                              purpose="comparison"))
