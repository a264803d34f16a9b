"""Cross-stage caching simulator: the paper's Fig. 3 example, and properties that hold for any schedule."""
import pytest

from hf_attnres.pipeline.caching import simulate_interleaved

# Attention Residuals, Fig. 3 (P=4 ranks, V=2 virtual stages, each block spanning two physical stages): what each
# receiving chunk gets as completed blocks with caching ("+[...]") and which partial sum crosses with it
PAPER_FIG3 = {
    1: ((0,), 1), 2: ((0, 1), None), 3: ((0, 1), 2),
    4: ((1, 2), None), 5: ((1, 2), 3), 6: ((2, 3), None), 7: ((2, 3), 4),
}


def test_paper_example_removes_six_redundant_block_transmissions():
    report = simulate_interleaved(num_stages=4, virtual_stages=2, layers_per_chunk=1, block_size=2)
    assert {t.chunk: (t.sent_cached, t.partial) for t in report.transitions} == PAPER_FIG3
    assert report.saved_in_virtual_stage(0) == 0  # the first virtual stage has no cache
    assert report.saved_in_virtual_stage(1) == 6
    assert report.naive_blocks - report.cached_blocks == 6


def test_keeping_own_blocks_saves_more_than_the_paper_counts():
    paper = simulate_interleaved(4, 2, 1, 2)
    own = simulate_interleaved(4, 2, 1, 2, cache_own_blocks=True)
    # ranks 1 and 3 completed b1 and b2 themselves in the first virtual stage
    assert own.saved_in_virtual_stage(1) == paper.saved_in_virtual_stage(1) + 2


@pytest.mark.parametrize("num_stages, virtual_stages, layers_per_chunk, block_size",
                         [(4, 2, 1, 2), (4, 4, 2, 2), (8, 2, 3, 2), (2, 3, 2, 5), (3, 1, 4, 3)])
def test_caching_sends_only_what_the_receiver_lacks(num_stages, virtual_stages, layers_per_chunk, block_size):
    report = simulate_interleaved(num_stages, virtual_stages, layers_per_chunk, block_size)
    held = {rank: set() for rank in range(num_stages)}
    held[0].add(0)  # rank 0 computes the embedding b0
    for t in report.transitions:
        assert set(t.sent_cached) <= set(t.sent_naive)
        assert set(t.sent_cached) | held[t.rank] >= set(t.completed), "the receiver must end up with every block"
        assert not set(t.sent_cached) & held[t.rank], "nothing the receiver already holds is sent again"
        held[t.rank] |= set(t.completed)
    if virtual_stages == 1:
        assert report.cached_blocks == report.naive_blocks


@pytest.mark.parametrize("num_stages, virtual_stages", [(4, 2), (4, 4), (8, 4)])
def test_peak_per_transition_drops_from_order_chunks_to_order_stages(num_stages, virtual_stages):
    """One block per chunk: naive transitions carry up to C = P * V blocks, cached ones at most P (the paper's
    O(C) -> O(P))."""
    report = simulate_interleaved(num_stages, virtual_stages, layers_per_chunk=2, block_size=2)
    assert report.peak_naive == num_stages * virtual_stages  # b0 .. b_{C-1} into the last chunk
    assert report.peak_cached <= num_stages
    # closed form: into virtual stage v >= 1, rank r already holds b0 .. b_{(v-1)P + r} (what reached its last chunk)
    for v in range(1, virtual_stages):
        assert report.saved_in_virtual_stage(v) == sum((v - 1) * num_stages + r + 1 for r in range(num_stages))


def test_rejects_impossible_schedules():
    with pytest.raises(ValueError, match="virtual_stages"):
        simulate_interleaved(4, 0, 1, 2)
