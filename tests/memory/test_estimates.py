"""The memory arithmetic against DeepSpeed's published estimator output and hand-computed cases.

Published output: deepspeedai/DeepSpeed docs/code-docs/source/memory.rst ("Memory Requirements"),
examples for ``total_params=2851e6`` (t5-3b / T0_3B), ``largest_layer_params=32e6``, 1 node with 8
GPUs, e.g.::

    estimate_zero3_model_states_mem_needs_all_cold(total_params=2851e6, largest_layer_params=32e6,
                                                   num_gpus_per_node=8, num_nodes=1)
      per CPU  |  per GPU |   Options
       71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
      127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
       63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1
      127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0
        1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1
      127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0

DeepSpeed prints ``x/2**30`` and labels it GB; cudalock prints the same numbers labelled GiB.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudalock.errors import UsageError
from cudalock.memory.estimates import (
    HostMemory,
    TrainingSetup,
    check_host_memory,
    checkpoint_save_spike,
    estimate_zero2_model_states_mem_needs,
    estimate_zero3_model_states_mem_needs,
    estimator_table,
    memory_needs,
    rule_of_thumb,
)
from cudalock.memory.render import render_needs

GIB = 2**30
T0_3B = 2851 * 10**6
T0_3B_LARGEST = 32 * 10**6

DOC_ZERO3_COLD = """\
  71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
 127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
  63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1
 127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0
   1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1
 127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0"""


def gb(value: int) -> str:
    return f"{value / GIB:.2f}"


def test_zero3_table_matches_deepspeed_documented_output_line_for_line() -> None:
    setup = TrainingSetup(
        params=T0_3B, zero_stage=3, gpus_per_node=8, largest_layer_params=T0_3B_LARGEST
    )
    lines = [row.line().rstrip().replace("GiB", "GB") for row in estimator_table(setup)]
    expected = [" " + line.rstrip() for line in DOC_ZERO3_COLD.splitlines()]
    assert [line.strip() for line in lines] == [line.strip() for line in expected]


def test_zero2_offload_matches_deepspeed_documented_output() -> None:
    # memory.rst, estimate_zero2_model_states_mem_needs_all_cold(total_params=2851e6,
    # num_gpus_per_node=8, num_nodes=1):  "127.45GB |   5.31GB | offload_optimizer=cpu"
    cpu, gpu = estimate_zero2_model_states_mem_needs(T0_3B, 8, 1, cpu_offload=True)
    assert (gb(cpu), gb(gpu)) == ("127.45", "5.31")
    # "127.45GB |  15.93GB | offload_optimizer=none": the CPU column still holds (4·P·8·1.5).
    cpu, gpu = estimate_zero2_model_states_mem_needs(T0_3B, 8, 1, cpu_offload=False)
    assert gb(cpu) == "127.45"
    # The documented 15.93GB GPU figure was printed by the older formula 4·P + 16·P/total_gpus
    # (= 6·P here). DeepSpeed 0.19's stage_1_and_2.py uses 2·P + int(18·P/total_gpus), which
    # is what cudalock follows: 2·2851e6 + 18·2851e6/8 = 5_702_000_000 + 6_414_750_000 bytes.
    assert gpu == 12_116_750_000
    assert gb(gpu) == "11.28"
    assert gb(6 * T0_3B) == "15.93"  # the documented figure, by the older formula


def test_zero2_hand_computed_seven_billion_on_eight_gpus() -> None:
    params = 7 * 10**9
    cpu, gpu = estimate_zero2_model_states_mem_needs(params, 8, 1, cpu_offload=True)
    assert cpu == params * 32 * 3 // 2  # max(4·8, 16) · 1.5
    assert gpu == 2 * params
    cpu, gpu = estimate_zero2_model_states_mem_needs(params, 4, 2, cpu_offload=True)
    assert cpu == params * 32 * 3 // 2  # total_gpus = 8 still decides max(4·8, 16)
    cpu, gpu = estimate_zero2_model_states_mem_needs(params, 2, 1, cpu_offload=True)
    assert cpu == params * 16 * 3 // 2  # max(8, 16) = 16
    cpu, gpu = estimate_zero2_model_states_mem_needs(params, 8, 1, cpu_offload=False)
    assert cpu == 4 * params * 8 * 3 // 2
    assert gpu == 2 * params + 18 * params // 8


def test_zero3_hand_computed_two_nodes() -> None:
    params, largest = 13 * 10**9, 325 * 10**6
    # gpus_factor = 1/2; zero_init=1, everything offloaded: 18·P·0.5·1.5
    cpu, gpu = estimate_zero3_model_states_mem_needs(params, largest, 8, 2, True, True, True)
    assert cpu == int(params * 18 * 0.5 * 1.5)
    assert gpu == 4 * largest
    # zero_init=0: max(4·8, 18·0.5) = 32
    cpu, _ = estimate_zero3_model_states_mem_needs(params, largest, 8, 2, True, True, False)
    assert cpu == params * 32 * 3 // 2
    cpu, gpu = estimate_zero3_model_states_mem_needs(params, largest, 8, 2, False, False, True)
    assert cpu == largest * 4 * 8 * 3 // 2
    assert gpu == 4 * largest + 18 * params // 16


def test_save_spike_zero2_is_every_rank_copying_16bit_weights() -> None:
    setup = TrainingSetup(params=14 * 10**9, zero_stage=2, gpus_per_node=6)
    # The public example: "clones the ENTIRE 14B model to CPU host RAM on every rank
    # (~28GB x num_ranks ~= 168GB)".
    assert checkpoint_save_spike(setup) == 6 * 2 * 14 * 10**9 == 168 * 10**9
    assert rule_of_thumb(setup) == 252 * 10**9  # 1.5 × 28 GB × 6


def test_save_spike_zero3_only_when_gathering_on_rank0() -> None:
    gathered = TrainingSetup(params=7 * 10**9, zero_stage=3, gpus_per_node=8)
    assert checkpoint_save_spike(gathered) == 14 * 10**9
    not_gathered = TrainingSetup(
        params=7 * 10**9, zero_stage=3, gpus_per_node=8, gather_16bit_weights=False
    )
    assert checkpoint_save_spike(not_gathered) == 0
    assert any("zero_to_fp32" in note for note in memory_needs(not_gathered).notes)


def test_needs_take_the_largest_phase_with_offload_held_during_save() -> None:
    params = 7 * 10**9
    setup = TrainingSetup(params=params, zero_stage=2, gpus_per_node=8, offload_optimizer=True)
    needs = memory_needs(setup)
    states = params * 32 * 3 // 2
    phases = {phase.name: phase.bytes for phase in needs.phases}
    assert phases["model states (DeepSpeed estimator)"] == states
    assert phases["checkpoint save"] == states + 8 * 2 * params
    assert phases["rule of thumb"] == 3 * params * 8
    assert needs.host_required_bytes == states + 16 * params


def test_host_short_by_cgroup_limit_gives_sizes_and_alternatives() -> None:
    params = 7 * 10**9
    setup = TrainingSetup(params=params, zero_stage=2, gpus_per_node=8, offload_optimizer=True)
    needs = memory_needs(setup)
    host = HostMemory(total_bytes=1024 * GIB, cgroup_limit_bytes=256 * GIB, source="test")
    verdict = check_host_memory(needs, host, gpu_memory_bytes=80 * GIB)
    assert verdict.host_enough is False
    assert verdict.shortfall_bytes == needs.host_required_bytes - 256 * GIB
    (finding,) = [f for f in verdict.findings if f.code == "host-memory-short"]
    assert "container/cgroup limit" in finding.message
    # 7e9·48 + 16·7e9 bytes = 448e9 bytes = 417.23 GiB → 418Gi for Kubernetes.
    assert verdict.kubernetes == {"requests.memory": "418Gi", "limits.memory": "418Gi"}
    assert any("418Gi" in fix for fix in finding.fix)
    labels = {alt.label: alt for alt in verdict.alternatives}
    # ZeRO-3 keeps the optimizer offload (16·P·1.5 = 168e9) plus rank 0's 2·P copy (14e9).
    assert labels["zero3-gathered"].needs.host_required_bytes == 168 * 10**9 + 14 * 10**9
    assert labels["zero3-gathered"].fits_host is True
    # Without optimizer offload the GPUs hold 2·P + 18·P/8 = 29.75e9 bytes: fits 80 GiB.
    assert labels["no-optimizer-offload"].needs.gpu_required_bytes == 29_750_000_000
    assert labels["no-optimizer-offload"].fits_gpu is True


def test_host_enough_and_unknown() -> None:
    setup = TrainingSetup(params=10**9, zero_stage=3, gpus_per_node=2, largest_layer_params=10**8)
    needs = memory_needs(setup)
    enough = check_host_memory(needs, HostMemory(total_bytes=64 * GIB))
    assert enough.host_enough is True
    assert [f.code for f in enough.findings] == ["host-memory-enough"]
    unknown = check_host_memory(needs, HostMemory())
    assert unknown.host_enough is None
    assert [f.code for f in unknown.findings] == ["host-memory-unknown"]


def test_gpu_too_small_is_reported() -> None:
    setup = TrainingSetup(params=70 * 10**9, zero_stage=2, gpus_per_node=8)
    verdict = check_host_memory(
        memory_needs(setup), HostMemory(total_bytes=8 * 1024 * GIB), gpu_memory_bytes=80 * GIB
    )
    assert verdict.gpu_enough is False
    assert "gpu-memory-short" in [f.code for f in verdict.findings]


def test_render_marks_the_chosen_row_and_states_units() -> None:
    setup = TrainingSetup(params=T0_3B, zero_stage=2, gpus_per_node=8, offload_optimizer=True)
    text = "\n".join(render_needs(memory_needs(setup)))
    assert "SW: Model with 2851M total params (ZeRO-2)." in text
    assert "127.45GiB |   5.31GiB | offload_optimizer=cpu  <- this run" in text
    assert "2**30" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": 0}, "more than zero"),
        ({"params": 10**9, "zero_stage": 4}, "expected 1, 2 or 3"),
        ({"params": 10**9, "gpus_per_node": 0}, "at least 1"),
        ({"params": 10**9, "offload_param": True}, "needs ZeRO-3"),
    ],
)
def test_bad_setups_are_usage_errors(kwargs: dict[str, int | bool], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        TrainingSetup(**kwargs)  # type: ignore[arg-type]


params_st = st.integers(min_value=10**6, max_value=2 * 10**12)
gpus_st = st.integers(min_value=1, max_value=16)
nodes_st = st.integers(min_value=1, max_value=64)


@given(params_st, gpus_st, nodes_st, st.booleans())
def test_required_covers_every_phase_and_spike_scales_with_ranks(
    params: int, gpus: int, nodes: int, offload: bool
) -> None:
    setup = TrainingSetup(
        params=params, zero_stage=2, gpus_per_node=gpus, nodes=nodes, offload_optimizer=offload
    )
    needs = memory_needs(setup)
    assert needs.host_required_bytes == max(p.bytes for p in needs.phases)
    assert needs.save_spike_bytes == gpus * 2 * params
    assert needs.host_required_bytes >= needs.save_spike_bytes


@given(
    params_st,
    st.integers(min_value=0, max_value=10**9),
    gpus_st,
    nodes_st,
    st.booleans(),
    st.booleans(),
)
def test_zero3_per_gpu_never_grows_with_more_nodes(
    params: int, largest: int, gpus: int, nodes: int, offload: bool, zero_init: bool
) -> None:
    fewer = estimate_zero3_model_states_mem_needs(
        params, largest, gpus, nodes, offload, False, zero_init
    )
    more = estimate_zero3_model_states_mem_needs(
        params, largest, gpus, nodes + 1, offload, False, zero_init
    )
    assert more[1] <= fewer[1]
    assert more[0] <= fewer[0]


@given(params_st, gpus_st)
def test_zero3_gathered_needs_less_host_than_zero2_at_save(params: int, gpus: int) -> None:
    zero2 = memory_needs(TrainingSetup(params=params, zero_stage=2, gpus_per_node=gpus))
    zero3 = memory_needs(TrainingSetup(params=params, zero_stage=3, gpus_per_node=gpus))
    assert zero3.save_spike_bytes * gpus == zero2.save_spike_bytes
    assert zero3.host_required_bytes <= zero2.host_required_bytes
