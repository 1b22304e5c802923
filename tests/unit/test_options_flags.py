"""The sampler's options are defined once: the command line's flags come from ``SamplerOptions``'s own
field definitions (and the Ray backend's), and every argument check splits as scikit-learn's
``check_scalar`` does — a wrong type is a ``TypeError``, a wrong value a ``ValueError``, both a
``RaydpError``. In process, no Ray."""

from __future__ import annotations

import argparse
import doctest
import json
import math
from dataclasses import fields

import numpy as np
import pytest

import raydp
from raydp import baselines, errors, options, validation
from raydp.cli import add_sampler_flags, main, make_parser, sampler_options
from raydp.engine import BACKENDS, AutoBackend, LocalBackend, RayBackend
from raydp.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    MechanismError,
    OracleError,
    PlanError,
    RaydpError,
    TargetError,
)
from raydp.options import RAY_FLAGS, Flag, SamplerOptions, not_on_command_line, option_flags, ray_flags


def _estimate_help(capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _parse(argv: list[str], **flag_keywords) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sampler_flags(parser, **flag_keywords)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------- one definition of every flag


def test_every_option_has_a_flag_or_says_why_not():
    for f in fields(SamplerOptions):
        assert "flag" in f.metadata, f"SamplerOptions.{f.name} neither names its flag nor says why it has none"
        if f.metadata["flag"] is None:
            assert len(f.metadata["no_flag"]) > 20, f.name
        else:
            assert isinstance(f.metadata["flag"], Flag) and f.metadata["flag"].name.startswith("--")
    assert not_on_command_line().keys() == {"keep_sample"}
    names = [flag.name for _, flag, _ in option_flags() + ray_flags()]
    assert len(names) == len(set(names))


def test_ray_flags_name_real_ray_backend_fields_of_the_type_they_parse():
    ray_fields = {f.name: f for f in fields(RayBackend) if f.init}
    for name, flag in RAY_FLAGS.items():
        assert name in ray_fields, f"RAY_FLAGS names {name!r}, which RayBackend does not have"
        annotation = str(ray_fields[name].type)
        assert flag.type.__name__ in annotation.replace(" ", "").split("|"), (name, annotation)
    for name, flag, default in option_flags():  # a typed flag parses the type its field holds
        annotation = str(next(f for f in fields(SamplerOptions) if f.name == name).type)
        assert flag.type is None if annotation == "bool" else flag.type.__name__ in annotation or annotation == "object"


def test_estimate_help_lists_every_flag(capsys):
    text = _estimate_help(capsys)
    for _, flag, _ in option_flags() + ray_flags():
        assert flag.name in text, flag.name
    assert "--store STORE" in text and "--out" not in text and "--time-budget SECONDS" in text
    assert "{" + ",".join(sorted(BACKENDS)) + "}" in text
    assert "keep-sample" not in text
    assert "(default: 30)" in text  # the connect timeout's default, read from RayBackend


def test_no_flags_give_the_default_options():
    assert sampler_options(_parse([])) == SamplerOptions()
    assert sampler_options(_parse([], store=False, seed_default=0)) == SamplerOptions(seed=0)


def test_every_flag_reaches_its_option():
    a = _parse(["--seed", "3", "--block-size", "7", "--backend", "ray", "--address", "127.0.0.1:1", "--num-cpus", "2",
                "--task-timeout", "9", "--connect-timeout", "4", "--store", "/tmp/x", "--resume", "--strict", "--quiet",
                "--pair-timeout", "1.5", "--time-budget", "20", "--no-replay"])
    o = sampler_options(a)
    assert (o.seed, o.block_size, o.store, o.resume, o.strict, o.progress, o.pair_timeout, o.time_budget,
            o.replay) == (3, 7, "/tmp/x", True, True, False, 1.5, 20.0, False)
    assert o.backend == RayBackend(address="127.0.0.1:1", num_cpus=2, task_timeout=9.0, connect_timeout=4.0)
    assert a.quiet is True and a.replay is False  # what jobs read from the namespace stays where it was
    assert sampler_options(a, seed=8, store=None, resume=False).seed == 8  # a job's own changes win
    auto = sampler_options(_parse(["--address", "127.0.0.1:1"]))
    assert isinstance(auto.backend, AutoBackend) and auto.backend.ray.address == "127.0.0.1:1"
    assert isinstance(sampler_options(_parse(["--backend", "local"])).backend, LocalBackend)


def test_a_job_without_a_store_has_no_store_flags_and_its_own_seed_default():
    parser = argparse.ArgumentParser()
    add_sampler_flags(parser, store=False, seed_default=0)
    text = parser.format_help()
    assert "--store" not in text and "--resume" not in text and "(default: 0)" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--store", "x"])


@pytest.mark.parametrize("argv, fragment", [
    (["--backend", "local", "--address", "127.0.0.1:1"], "--address needs --backend auto or ray"),
    (["--backend", "local", "--num-cpus", "2", "--task-timeout", "3"], "--num-cpus, --task-timeout need --backend"),
])
def test_ray_flags_with_the_local_backend_are_refused(argv, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        sampler_options(_parse(argv))


_EST = ["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
        "--oracle-args", '{"rate": 1}', "--n", "10", "--backend", "local", "--quiet", "--json"]


def test_time_budget_flag_sizes_the_run_from_gamma_alone(capsys):
    assert main([*_EST, "--gamma", "0.3", "--m", "100", "--time-budget", "1"]) == 2
    err = capsys.readouterr().err
    assert err == "raydp: error: --time-budget chooses m from --gamma; give --gamma alone with it (no --m or --k)\n"
    assert main([*_EST, "--gamma", "0.3", "--time-budget", "0"]) == 2
    assert "time_budget must be a positive number of seconds" in capsys.readouterr().err
    assert main([*_EST, "--gamma", "0.3", "--time-budget", "0.5", "--seed", "0"]) == 0
    out = json.loads(capsys.readouterr().out)  # the budget reached the run, which sized m from it
    assert out["sizing"]["budget_seconds"] == 0.5 and out["sizing"]["fewest_pairs"] == raydp.make_plan(gamma=0.3).m
    assert out["plan"]["m"] == out["sizing"]["m"] >= out["sizing"]["fewest_pairs"]
    assert main([*_EST, "--gamma", "0.3", "--seed", "0"]) == 0
    assert "sizing" not in json.loads(capsys.readouterr().out)  # no flag, no budget: the fewest pairs


def test_the_command_line_turns_a_wrong_type_into_one_line(capsys):
    # a JSON string where the oracle wants an integer: an OracleTypeError, which main turns into one line too
    code = main(["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:normal",
                 "--oracle-args", '{"dim": "2"}', "--n", "5", "--m", "50"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.strip() == "raydp: error: dim must be None (scalar records) or a positive integer below 2**63, got '2'"
    code = main(["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:uniform", "--n", "5",
                 "--m", "50", "--mechanism", "bernstein", "--mechanism-args", '{"lattice": "4", "dims": 1}'])
    err = capsys.readouterr().err  # the mechanism's own words, not re-worded as arguments that do not fit
    assert code == 2 and err.startswith("raydp: error: lattice (K") and err.endswith("got '4'\n")


# ----------------------------------------------------------------------------- wrong type vs wrong value

_FAMILIES = [InvalidArgumentError, PlanError, MechanismError, OracleError, TargetError]

# every public check of raydp.validation: (name, call with a wrong type, call with a wrong value); each call
# takes the error family to raise
_CHECKS = [
    ("check_int", lambda e: validation.check_int(2.0, "n", min_value=1, error=e),
     lambda e: validation.check_int(0, "n", min_value=1, error=e)),
    ("check_int", lambda e: validation.check_int(True, "n", error=e),
     lambda e: validation.check_int(5, "n", max_value=4, error=e)),
    ("check_real", lambda e: validation.check_real("0.5", "x", error=e),
     lambda e: validation.check_real(math.nan, "x", error=e)),
    ("check_real", lambda e: validation.check_real(np.bool_(True), "x", error=e),
     lambda e: validation.check_real(1.0, "x", max_value=1, include_max=False, error=e)),
    ("check_bool", lambda e: validation.check_bool(1, "strict", error=e),
     None),  # a bool has no wrong value
    ("check_epsilon", lambda e: validation.check_epsilon(None, error=e),
     lambda e: validation.check_epsilon(0.0, error=e)),
    ("check_delta", lambda e: validation.check_delta("1e-5", error=e),
     lambda e: validation.check_delta(0.0, allow_zero=False, error=e)),
    ("check_epsilon_delta", lambda e: validation.check_epsilon_delta(1.0, [0.0], error=e),
     lambda e: validation.check_epsilon_delta(1.0, 1.0, error=e)),
    ("check_gamma", lambda e: validation.check_gamma(1j, error=e),
     lambda e: validation.check_gamma(0.0, error=e)),
    ("check_nonnegative", lambda e: validation.check_nonnegative("1", "sensitivity", error=e),
     lambda e: validation.check_nonnegative(-1.0, "sensitivity", error=e)),
    ("fail", lambda e: validation.fail(e, "k", "an integer", "x", wrong_type=True),  # made, not raised
     lambda e: validation.fail(e, "k", "an integer", -1)),
]


def _raised(call, family):
    """What ``call(family)`` raised (or, for ``fail``, returned to be raised)."""
    try:
        out = call(family)
    except Exception as exc:  # noqa: BLE001 - the point is which class it is
        return exc
    return out if isinstance(out, Exception) else None


def test_the_table_covers_every_public_check():
    assert {name for name, *_ in _CHECKS} == set(validation.__all__)


@pytest.mark.parametrize("family", _FAMILIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name, wrong_type, wrong_value", _CHECKS, ids=[c[0] for c in _CHECKS])
def test_a_wrong_type_is_a_type_error_and_a_wrong_value_a_value_error(name, wrong_type, wrong_value, family):
    exc = _raised(wrong_type, family)
    assert isinstance(exc, TypeError) and isinstance(exc, RaydpError), (name, exc)
    assert isinstance(exc, family) is (family is not InvalidArgumentError)  # a family keeps catching its own
    assert type(exc) is errors.type_error_for(family)
    if family is InvalidArgumentError:
        assert type(exc) is InvalidTypeError and not isinstance(exc, ValueError)
    if wrong_value is not None:
        exc = _raised(wrong_value, family)
        assert isinstance(exc, ValueError) and isinstance(exc, RaydpError) and isinstance(exc, family), (name, exc)
        assert not isinstance(exc, TypeError)


def test_the_same_words_for_either_kind():
    with pytest.raises(InvalidTypeError, match=r"^n must be an integer >= 1, got 2\.0$"):
        validation.check_int(2.0, "n", min_value=1)
    with pytest.raises(InvalidArgumentError, match=r"^n must be an integer >= 1, got 0$"):
        validation.check_int(0, "n", min_value=1)
    with pytest.raises(InvalidTypeError, match=r"^strict must be True or False, got 'yes'$"):
        validation.check_bool("yes", "strict")


@pytest.mark.parametrize("kw, error", [
    (dict(seed="1"), InvalidTypeError), (dict(seed=-1), InvalidArgumentError),
    (dict(block_size=2.5), InvalidTypeError), (dict(block_size=0), InvalidArgumentError),
    (dict(strict=1), InvalidTypeError), (dict(store=3), InvalidTypeError),
    (dict(pair_timeout="5"), InvalidTypeError), (dict(pair_timeout=-5.0), InvalidArgumentError),
    (dict(time_budget=True), InvalidTypeError), (dict(time_budget=math.inf), InvalidArgumentError),
    (dict(backend="spark"), InvalidArgumentError), (dict(resume=True), InvalidArgumentError),
])
def test_sampler_options_split_the_same_way(kw, error):
    with pytest.raises(error) as info:
        SamplerOptions(**kw)
    assert isinstance(info.value, RaydpError) and type(info.value) is error
    with pytest.raises(InvalidTypeError, match="options must be a raydp.SamplerOptions"):
        SamplerOptions.of({"seed": 1})


def test_the_old_alias_is_gone_and_the_new_class_is_public():
    assert not hasattr(errors, "InvalidArgument") and not hasattr(raydp, "InvalidArgument")
    assert raydp.InvalidTypeError is InvalidTypeError and "InvalidTypeError" in raydp.__all__


def test_docstring_examples_run():
    for module in (validation, errors, options):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0 and result.attempted > 0, module.__name__


# ----------------------------------------------------------------------------- one backend tuple


def test_sample_and_aggregate_takes_the_sampler_backends(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if AutoBackend().cluster_reason() is not None:
        pytest.skip("Ray is initialised in this process: auto would use it")
    x = np.clip(np.random.default_rng(3).normal(size=200), -4, 4)
    z = baselines.block_values(x, np.mean, 20)  # the default, auto: small work stays in process
    np.testing.assert_array_equal(z, [np.mean(x[j::20]) for j in range(20)])
    r = baselines.sample_and_aggregate(x, np.mean, 1.0, -4.0, 4.0, blocks=20)
    assert r.info["backend"] == "local"
    np.testing.assert_array_equal(baselines.block_values(x, np.mean, 20, backend=LocalBackend()), z)
    with pytest.raises(InvalidArgumentError, match="backend must be one of " + ", ".join(BACKENDS)):
        baselines.block_values(x, np.mean, 20, backend="spark")
    with pytest.raises(InvalidTypeError, match="f must be callable"):
        baselines.block_values(x, "mean", 20)
