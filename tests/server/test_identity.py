import pytest

from server.history import HistoryStore
from server.identity import MAX_NAME_CHARS, LearnerStore, checked_name
from trainer.errors import ConfigError


@pytest.fixture
def learners(tmp_path):
    return LearnerStore(HistoryStore(tmp_path / "history.sqlite3"))


def test_a_token_finds_its_learner_again_and_nothing_else_does(learners, tmp_path):
    learner, token = learners.create("Ada")
    other, other_token = learners.create()
    assert learners.by_token(token) == learner
    assert learners.by_token(other_token) == other and other.display_name  # a generated name
    assert learner.id != other.id and token != other_token and len(token) >= 40
    for forged in (token[:-1], token + "x", "", None, 42, learner.id, "x" * 500):
        assert learners.by_token(forged) is None
    # A restart (a new store on the same file) knows the same learners; the token itself is not in the file.
    again = LearnerStore(HistoryStore(tmp_path / "history.sqlite3"))
    assert again.by_token(token) == learner
    assert token.encode() not in (tmp_path / "history.sqlite3").read_bytes()


def test_renaming_and_the_names_of_the_class(learners):
    learner, token = learners.create("Ada")
    assert learners.rename(learner.id, "  Ada   Lovelace ").display_name == "Ada Lovelace"
    assert learners.by_token(token).display_name == "Ada Lovelace"
    assert learners.names() == {learner.id: "Ada Lovelace"}


@pytest.mark.parametrize("bad", ["", "   ", None, "x" * (MAX_NAME_CHARS + 1)])
def test_bad_names_get_one_line(bad):
    with pytest.raises(ConfigError) as err:
        checked_name(bad)
    assert "\n" not in str(err.value)


def test_signed_in_learners_keep_one_id_per_subject(learners):
    first = learners.signed_in("issuer|alice", "Alice")
    again = learners.signed_in("issuer|alice", "Alice B.")
    assert first.id == again.id and again.display_name == "Alice B."
    assert learners.signed_in("issuer|bob", "Bob").id != first.id


@pytest.mark.parametrize(("given", "kept"), [
    ("  Ada   Lovelace ", "Ada Lovelace"),
    ("   ", "signed-in learner"),  # a blank name from the provider must not refuse the sign-in
    ("", "signed-in learner"),
    (None, "signed-in learner"),
    ("x" * (MAX_NAME_CHARS + 5), "x" * MAX_NAME_CHARS),
])
def test_a_providers_name_is_tidied_never_refused(learners, given, kept):
    assert learners.signed_in("issuer|ada", given).display_name == kept
