"""Each training loop holds its arguments one way: a frozen dataclass of the same names."""

import dataclasses
import inspect

import pytest

from kbert.training import run_pretraining
from kbert.training.distillation import loop as distillation
from kbert.training.finetuning import loop as finetuning
from kbert.training.pretraining.settings import PretrainingSettings

LOOPS = [(run_pretraining, PretrainingSettings),
         (finetuning.run_finetuning, finetuning._Settings),
         (distillation.run_distillation, distillation._Settings)]


@pytest.mark.parametrize("function, settings", LOOPS, ids=lambda x: getattr(x, "__name__", ""))
def test_the_settings_are_the_arguments_in_order_frozen_and_without_second_defaults(function,
                                                                                     settings):
    fields = dataclasses.fields(settings)
    assert [field.name for field in fields] == list(inspect.signature(function).parameters)
    # The defaults live in the signature only (gin and the docs read them there).
    assert all(field.default is dataclasses.MISSING
               and field.default_factory is dataclasses.MISSING for field in fields)
    assert settings.__dataclass_params__.frozen
