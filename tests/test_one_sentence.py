"""Errors a user causes that escaped as tracebacks (issue 73), each one sentence through the command line:
exit status 2, one `structnmt: error:` line naming the option or file and the fix, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_user_error, cli


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> Path:
    """A synthetic dataset with its gold trees (what `structnmt features` computes LPEA positions from)."""
    from test_feature_store import parsed_dataset

    return parsed_dataset(tmp_path_factory.mktemp("parsed"), n_train=60)


@pytest.mark.parametrize("request_, fragment", [
    ("lpea_positions:k=abc", "--feature lpea_positions:k=abc: k=abc is not a whole number; write it as "
                             "lpea_positions:k=2."),  # a TypeError in the feature, after the dataset was read
    ("lpea_positions:k=2,rule=rule3", "--feature lpea_positions:k=2,rule=rule3: unknown local-phrase rule 'rule3'; "
                                      "use one of"),  # a ValueError there
    ("lpea_positions:k=-1", "k must be >= 0, got -1"),
    ("ngram_hypernodes:k=2,unit=letter", "unknown unit 'letter'; use word or piece"),
    ("lpea_positions:k=[2", "the value of 'k=[2' cannot be read (YAML)"),
])
def test_features_parameters_are_checked_before_any_work(parsed, capsys, request_, fragment):
    code, _, err = cli(capsys, "features", "--data", parsed, "--feature", request_, "--no-progress")
    assert_user_error(code, err, fragment)
    assert not (parsed / "features").exists()
