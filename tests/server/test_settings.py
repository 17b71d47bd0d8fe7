from pathlib import Path

import pytest

from server.settings import Settings
from trainer.errors import ConfigError


def test_defaults_without_environment():
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.history_path == Path("./state") / "history.sqlite3"


def test_environment_variables_are_read():
    settings = Settings.from_env(
        {
            "AMP_LAB_MAX_EPOCHS": "3",
            "AMP_LAB_MAX_BATCH_SIZE": " 512 ",
            "AMP_LAB_MAX_QUEUED_PER_LEARNER": "1",
            "AMP_LAB_MAX_SUBSET": "10000",
            "AMP_LAB_DATA_ROOT": "/srv/cifar",
            "AMP_LAB_STATE_DIR": "/srv/amp-state",
            "AMP_LAB_DEVICE": "cpu",
            "UNRELATED": "x",
        }
    )
    assert settings == Settings(3, 512, 1, 10000, "/srv/cifar", "/srv/amp-state", "cpu")
    assert settings.history_path == Path("/srv/amp-state/history.sqlite3")


def test_max_subset_none_means_no_limit():
    assert Settings.from_env({"AMP_LAB_MAX_SUBSET": "none"}).max_subset is None
    assert Settings.from_env({"AMP_LAB_MAX_SUBSET": ""}).max_subset is None


def test_the_whole_queue_is_uncapped_unless_the_instructor_sets_a_cap(tmp_path):
    assert Settings().max_queued_total is None
    assert Settings.from_env({"AMP_LAB_MAX_QUEUED_TOTAL": " 30 "}).max_queued_total == 30
    assert Settings.from_env({"AMP_LAB_MAX_QUEUED_TOTAL": "none"}).max_queued_total is None
    config_file = tmp_path / "amp_lab.toml"
    config_file.write_text("max_queued_total = 12\n")
    assert Settings.from_env({"AMP_LAB_CONFIG": str(config_file)}).max_queued_total == 12


def test_toml_file_is_read_and_environment_overrides_it(tmp_path):
    config_file = tmp_path / "amp_lab.toml"
    config_file.write_text('max_epochs = 7\nmax_batch_size = 1024\ndata_root = "/data/c10"\n')
    environ = {"AMP_LAB_CONFIG": str(config_file), "AMP_LAB_MAX_EPOCHS": "4"}
    settings = Settings.from_env(environ)
    assert settings.max_epochs == 4  # the variable wins over the file
    assert settings.max_batch_size == 1024
    assert settings.data_root == "/data/c10"


def test_the_queue_limits_old_name_is_still_read_from_a_file_or_the_environment(tmp_path):
    assert Settings.from_env({"AMP_LAB_MAX_QUEUED_PER_SESSION": "4"}).max_queued_per_learner == 4
    both = {"AMP_LAB_MAX_QUEUED_PER_SESSION": "4", "AMP_LAB_MAX_QUEUED_PER_LEARNER": "3"}
    assert Settings.from_env(both).max_queued_per_learner == 3  # the new name wins
    old_file = tmp_path / "old.toml"
    old_file.write_text("max_queued_per_session = 1\n")
    assert Settings.from_env({"AMP_LAB_CONFIG": str(old_file)}).max_queued_per_learner == 1
    old_file.write_text("max_queued_per_session = 1\nmax_queued_per_learner = 2\n")
    with pytest.raises(ConfigError, match="sets both max_queued_per_learner and its old name max_queued_per_session"):
        Settings.from_env({"AMP_LAB_CONFIG": str(old_file)})


@pytest.mark.parametrize(
    "var, value, named",
    [
        ("AMP_LAB_MAX_EPOCHS", "ten", "AMP_LAB_MAX_EPOCHS"),
        ("AMP_LAB_MAX_EPOCHS", "0", "AMP_LAB_MAX_EPOCHS"),
        ("AMP_LAB_MAX_BATCH_SIZE", "1.5", "AMP_LAB_MAX_BATCH_SIZE"),
        ("AMP_LAB_MAX_BATCH_SIZE", "10000000", "AMP_LAB_MAX_BATCH_SIZE"),
        ("AMP_LAB_MAX_QUEUED_PER_LEARNER", "-1", "AMP_LAB_MAX_QUEUED_PER_LEARNER"),
        ("AMP_LAB_MAX_SUBSET", "lots", "AMP_LAB_MAX_SUBSET"),
        ("AMP_LAB_MAX_QUEUED_TOTAL", "0", "AMP_LAB_MAX_QUEUED_TOTAL"),
        ("AMP_LAB_MAX_QUEUED_TOTAL", "many", "AMP_LAB_MAX_QUEUED_TOTAL"),
        ("AMP_LAB_DEVICE", "gpu", "AMP_LAB_DEVICE"),
        ("AMP_LAB_STATE_DIR", "  ", "AMP_LAB_STATE_DIR"),
        ("AMP_LAB_SILENT_RUN_LIMIT_S", "5", "AMP_LAB_SILENT_RUN_LIMIT_S"),  # shorter than loading data may take
    ],
)
def test_invalid_environment_values_name_the_variable(var, value, named):
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({var: value})
    message = str(caught.value)
    assert named in message
    assert "\n" not in message


def test_a_hung_run_is_stopped_after_15_minutes_unless_the_instructor_says_otherwise():
    assert Settings().silent_run_limit_s == 900
    assert Settings.from_env({"AMP_LAB_SILENT_RUN_LIMIT_S": "1800"}).silent_run_limit_s == 1800


def test_bad_config_files_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.from_env({"AMP_LAB_CONFIG": str(tmp_path / "missing.toml")})
    broken = tmp_path / "broken.toml"
    broken.write_text("max_epochs = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.from_env({"AMP_LAB_CONFIG": str(broken)})
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("max_epoch = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'max_epoch'"):
        Settings.from_env({"AMP_LAB_CONFIG": str(unknown)})
    wrong_type = tmp_path / "wrong_type.toml"
    wrong_type.write_text('max_epochs = "many"\n')
    with pytest.raises(ConfigError, match="max_epochs"):
        Settings.from_env({"AMP_LAB_CONFIG": str(wrong_type)})


def test_describe_lists_every_setting_with_its_variable():
    rows = Settings(max_epochs=9).describe()
    assert {row[0] for row in rows} == {
        "max_epochs",
        "max_batch_size",
        "max_queued_per_learner",
        "max_queued_total",
        "max_subset",
        "data_root",
        "state_dir",
        "peaks_cache",
        "device",
        "presets",
        "silent_run_limit_s",
        "instructor_password",
        "instructor_emails",
        "gpus",
        "ray_address",
        "class_mode",
        "ask_names",
    }
    assert ("max_epochs", "AMP_LAB_MAX_EPOCHS", 9) == rows[0][:3]

    assert all(var.startswith("AMP_LAB_") and meaning for _, var, _, meaning in rows)


def test_the_instructor_password_is_never_shown_and_never_short():
    shown = dict((row[0], row[2]) for row in Settings(instructor_password="a long enough secret").describe())
    assert shown["instructor_password"] == "set (hidden)"
    assert dict((row[0], row[2]) for row in Settings().describe())["instructor_password"] == "not set"
    with pytest.raises(ConfigError, match="at least 12 characters"):
        Settings.from_env({"AMP_LAB_INSTRUCTOR_PASSWORD": "secret"})


def test_instructor_emails_from_a_list_or_commas():
    assert Settings(instructor_emails=["A@x.org", "b@x.org"]).instructor_email_set == {"a@x.org", "b@x.org"}
    assert Settings.from_env({"AMP_LAB_INSTRUCTOR_EMAILS": " a@x.org, ,b@x.org"}).instructor_email_set == {
        "a@x.org", "b@x.org"}


@pytest.mark.parametrize("text, problem", [("epochs=1&colour=red", "unknown preset 'colour'"),
                                           ("epochs=1&epochs=2", "given twice"), ("epochs", "name=value pairs")])
def test_bad_presets_are_refused_at_start_with_one_line(text, problem):
    with pytest.raises(ConfigError, match=problem):
        Settings.from_env({"AMP_LAB_PRESETS": text})
    assert Settings(presets="epochs=1&batch_size=128").presets == "epochs=1&batch_size=128"


def test_gpus_are_every_gpu_unless_the_instructor_lists_some(tmp_path):
    assert Settings().gpus is None
    assert Settings.from_env({"AMP_LAB_GPUS": "3, 1"}).gpus == [1, 3]
    assert Settings.from_env({"AMP_LAB_GPUS": "all"}).gpus is None
    config = tmp_path / "amp-lab.toml"
    config.write_text("gpus = [0, 1]\n")
    assert Settings.from_env({"AMP_LAB_CONFIG": str(config)}).gpus == [0, 1]
    with pytest.raises(ConfigError, match="AMP_LAB_GPUS must list GPU numbers like 0,1"):
        Settings.from_env({"AMP_LAB_GPUS": "first"})
    with pytest.raises(ConfigError, match=r"AMP_LAB_GPUS \(gpus\) must be a list of GPU numbers"):
        Settings(gpus=[])
