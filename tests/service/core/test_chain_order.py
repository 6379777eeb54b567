"""The admission chain's order is code: ``build_chain`` takes the server's orders and refuses any other.

The server builds its chain from its settings (:func:`service.server.admission_chain`): request log
and tracing always, the concurrency limit when set, the key check with keys, the priority class
always, quotas when a key has one, the error mapping innermost. Every such chain is accepted;
steps out of order, twice, unknown, or quotas without the key check are refused
(:class:`~service.core.chain.ChainOrderError`) before any call runs.
"""

from __future__ import annotations

import itertools

import pytest

from service.core.admission.authentication import Authentication
from service.core.admission.concurrency import ConcurrencyLimit
from service.core.admission.error_mapping import ErrorMapping
from service.core.admission.priority import PriorityClass
from service.core.admission.quota import Quota
from service.core.admission.request_log import RequestLog
from service.core.admission.tracing import Tracing
from service.core.chain import ORDER, REQUIRES, AdmissionStep, ChainOrderError, build_chain
from service.quotas import Quotas
from service.server import admission_chain
from service.settings import Settings
from service.shared.api_keys import load_api_keys

KEYS_FILE = 'rated:\n  key: "rated-Secret-order-01"\n  requests_per_second: 2\n'


@pytest.fixture
def keys(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(KEYS_FILE)
    return load_api_keys("single-Secret-order-0002", path)


def steps_by_name(keys) -> dict[str, AdmissionStep]:
    """One step of each kind, by name."""
    return {
        "request_log": RequestLog(),
        "tracing": Tracing(),
        "concurrency": ConcurrencyLimit(4),
        "authentication": Authentication(keys),
        "priority": PriorityClass(),
        "quota": Quota(Quotas(keys)),
        "error_mapping": ErrorMapping(),
    }


def test_every_step_is_named_in_the_order():
    assert set(steps_by_name(load_api_keys("single-Secret-order-0002"))) == set(ORDER)
    assert len(ORDER) == len(set(ORDER))
    assert REQUIRES == {"quota": ("authentication",)}


@pytest.mark.parametrize("with_keys", [False, True], ids=["no-keys", "keys"])
@pytest.mark.parametrize("with_quotas", [False, True], ids=["no-quotas", "quotas"])
@pytest.mark.parametrize("concurrency", [0, 8], ids=["unlimited", "limited"])
def test_the_servers_chains_are_accepted(tmp_path, with_keys, with_quotas, concurrency):
    """Every chain :func:`service.server.admission_chain` builds from settings (quotas need keys)."""
    if with_quotas and not with_keys:
        keys = load_api_keys()
        quotas = Quotas(keys)
        assert not quotas  # a server without keys has no quotas: nothing else to build
    else:
        path = tmp_path / "keys.yaml"
        path.write_text(KEYS_FILE if with_quotas else 'plain: "plain-Secret-order-0003"\n')
        keys = load_api_keys(None, path) if with_keys else load_api_keys()
        quotas = Quotas(keys)
        assert bool(quotas) is with_quotas
    settings = Settings(max_concurrent_requests=concurrency)
    chain = admission_chain(settings, keys, quotas)
    expected = [
        "request_log",
        "tracing",
        *(["concurrency"] if concurrency else []),
        *(["authentication"] if with_keys else []),
        "priority",
        *(["quota"] if quotas else []),
        "error_mapping",
    ]
    assert list(chain.names) == expected
    assert chain.names == tuple(name for name in ORDER if name in expected)  # ORDER's order
    if concurrency:
        step = chain.step("concurrency")
        assert isinstance(step, ConcurrencyLimit) and step.max_in_flight == concurrency
    assert (chain.step("authentication") is not None) is with_keys


def test_every_subset_in_order_is_accepted_unless_it_lacks_a_step_it_needs(keys):
    steps = steps_by_name(keys)
    for size in range(len(ORDER) + 1):
        for names in itertools.combinations(ORDER, size):  # combinations keep ORDER's order
            chain_steps = [steps[name] for name in names]
            if "quota" in names and "authentication" not in names:
                with pytest.raises(ChainOrderError, match="'quota' needs 'authentication'"):
                    build_chain(chain_steps)
            else:
                assert build_chain(chain_steps).names == names


@pytest.mark.parametrize(
    ("first", "second"),
    list(itertools.combinations(ORDER, 2)),
    ids=[f"{a}-{b}" for a, b in itertools.combinations(ORDER, 2)],
)
def test_each_pair_out_of_order_is_refused(keys, first, second):
    steps = steps_by_name(keys)
    with pytest.raises(ChainOrderError, match=f"'{first}' must come before '{second}'"):
        build_chain([steps[second], steps[first]])


def test_a_wrong_order_within_the_full_chain_is_refused(keys):
    steps = steps_by_name(keys)
    full = [steps[name] for name in ORDER]
    assert build_chain(full).names == ORDER
    for i in range(len(full) - 1):
        swapped = list(full)
        swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
        with pytest.raises(ChainOrderError, match="must come before"):
            build_chain(swapped)
    with pytest.raises(ChainOrderError):
        build_chain(list(reversed(full)))


def test_quotas_counted_before_the_key_is_known_are_refused(keys):
    """The quota step reads the caller the key check names: before it, every call is one caller."""
    steps = steps_by_name(keys)
    with pytest.raises(ChainOrderError, match="'authentication' must come before 'quota'"):
        build_chain([steps["request_log"], steps["quota"], steps["authentication"], steps["error_mapping"]])
    with pytest.raises(ChainOrderError, match="'quota' needs 'authentication' before it"):
        build_chain([steps["request_log"], steps["priority"], steps["quota"], steps["error_mapping"]])
    with pytest.raises(ChainOrderError, match="'quota' needs 'authentication' before it"):
        build_chain([steps["quota"]])


@pytest.mark.parametrize("name", ORDER)
def test_a_step_twice_is_refused(keys, name):
    steps = steps_by_name(keys)
    with pytest.raises(ChainOrderError, match="comes twice"):
        build_chain([steps[name], steps[name]])
    same_kind = type(steps[name])  # another instance of the same step: still twice
    chain = [steps[n] for n in ORDER]
    chain.insert(ORDER.index(name) + 1, steps_by_name(keys)[name])
    assert isinstance(chain[ORDER.index(name) + 1], same_kind)
    with pytest.raises(ChainOrderError, match="comes twice"):
        build_chain(chain)


class Unknown(AdmissionStep):
    name = "rate_limit"


class Unnamed(AdmissionStep):
    """A step that forgot its name (the base class's ``""``)."""


@pytest.mark.parametrize("step", [Unknown(), Unnamed()], ids=["unknown", "unnamed"])
def test_an_unknown_step_is_refused_naming_the_steps(keys, step):
    steps = steps_by_name(keys)
    with pytest.raises(ChainOrderError, match="unknown admission step") as caught:
        build_chain([steps["request_log"], step, steps["error_mapping"]])
    assert all(name in str(caught.value) for name in ORDER)
    with pytest.raises(ChainOrderError, match="unknown admission step"):
        build_chain([step])


def test_an_empty_chain_runs_the_operation_alone():
    assert build_chain([]).names == ()
