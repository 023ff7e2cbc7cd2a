"""DNA tokenizer (IUPAC, soft-masking, errors) and the classifier network (pooling, strands)."""

import pytest
import torch
import torch.nn.functional as F

from titans_seq.domains.genomics import DNATokenizer, reverse_complement, reverse_complement_ids
from titans_seq.domains.genomics.model import DNAClassifierNet, MotifStem, reverse_within_length


def test_tokenizer_maps_bases_case_and_iupac():
    tok = DNATokenizer()
    assert tok.encode("ACGTN").tolist() == [1, 2, 3, 4, 5]
    assert tok.encode("acgtn").tolist() == [1, 2, 3, 4, 5]  # soft-masked bases upper-cased
    assert tok.encode("RYKMSWBDHV").tolist() == [5] * 10  # ambiguity codes -> N
    ids, mask = DNATokenizer(keep_mask=True).encode("ACgt")
    assert ids.tolist() == [1, 2, 3, 4] and mask.tolist() == [False, False, True, True]
    assert tok.decode(tok.encode("GATTACA")) == "GATTACA"


def test_tokenizer_errors_name_the_sequence_and_position():
    with pytest.raises(ValueError, match=r"chr7:100.*'X' at position 3"):
        DNATokenizer().encode("ACGXT", name="chr7:100")
    with pytest.raises(ValueError, match=r"IUPAC ambiguity code.*'R' at position 2"):
        DNATokenizer(strict=True).encode("ACRT")
    with pytest.raises(ValueError, match="empty"):
        DNATokenizer().encode("")
    with pytest.raises(ValueError, match="position 1"):
        DNATokenizer().encode("Aé")
    with pytest.raises(TypeError, match="str"):
        DNATokenizer().encode(b"ACGT")


def test_reverse_complement_over_the_iupac_table():
    assert reverse_complement("AACGTN") == "NACGTT"
    assert reverse_complement("RYKMSWBDHV") == "BDHVWSKMRY"
    assert reverse_complement("acGT") == "ACgt"
    for s in ("ACGTRYKMBDHVN", "GATTACA"):
        assert reverse_complement(reverse_complement(s)) == s
    with pytest.raises(ValueError, match="X"):
        reverse_complement("AXG")


def test_id_reverse_complement_keeps_padding_right():
    tok = DNATokenizer()
    ids, lengths = tok.batch(["ACGTT", "GAN"])
    rc = reverse_complement_ids(ids, lengths)
    assert tok.decode(rc[0]) == reverse_complement("ACGTT")
    assert tok.decode(rc[1]) == reverse_complement("GAN") and rc[1, 3:].eq(0).all()


def test_reverse_within_length_is_an_involution():
    x = torch.randn(3, 7, 2)
    lengths = torch.tensor([7, 4, 1])
    y = reverse_within_length(x, lengths)
    torch.testing.assert_close(y[1, :4], x[1, :4].flip(0))
    torch.testing.assert_close(y[1, 4:], x[1, 4:])
    torch.testing.assert_close(reverse_within_length(y, lengths), x)


def small_net(**options):
    torch.manual_seed(0)
    defaults = dict(
        num_classes=3, dim=16, depth=1, heads=2, mixer_options={"chunk_size": 4}, dropout=0.0
    )
    return DNAClassifierNet(**{**defaults, **options}).eval()


@pytest.mark.parametrize(
    "stem_width, stem_stride, kmer_size", [(0, 1, 0), (7, 1, 0), (7, 1, 3), (7, 4, 0), (5, 3, 3)]
)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("rc_mode", ["none", "posthoc", "conjoin"])
def test_padding_is_never_counted(bidirectional, rc_mode, stem_width, stem_stride, kmer_size):
    net = small_net(
        bidirectional=bidirectional,
        rc_mode=rc_mode,
        stem_width=stem_width,
        stem_stride=stem_stride,
        kmer_size=kmer_size,
    )
    if net.kmer is not None:  # a trained head: its logits are not zero
        torch.nn.init.normal_(net.kmer.linear.weight)
    tok = DNATokenizer()
    ids, lengths = tok.batch(["ACGTACGGTA", "GGCAT"])
    logits = net(ids, lengths)
    alone_ids, alone_len = tok.batch(["GGCAT"])
    torch.testing.assert_close(logits[1:], net(alone_ids, alone_len), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kmer_size", [0, 3])
def test_conjoined_predictions_are_reverse_complement_invariant(kmer_size):
    net = small_net(rc_mode="conjoin", kmer_size=kmer_size)
    if net.kmer is not None:
        torch.nn.init.normal_(net.kmer.linear.weight)
    tok = DNATokenizer()
    seqs = ["ACGTTGCAAGT", "GGGATC"]
    ids, lengths = tok.batch(seqs)
    rc_ids, _ = tok.batch([reverse_complement(s) for s in seqs])
    torch.testing.assert_close(net(ids, lengths), net(rc_ids, lengths), rtol=1e-5, atol=1e-5)
    plain = small_net(rc_mode="none")
    assert not torch.allclose(plain(ids, lengths), plain(rc_ids, lengths))


def test_posthoc_conjoins_outside_training_only():
    """ "posthoc" reads one strand in training and averages both strands' logits outside
    it: the same logits as "conjoin" in eval mode, those of "none" in training mode."""
    tok = DNATokenizer()
    seqs = ["ACGTTGCAAGT", "GGGATC", "TTACG"]
    ids, lengths = tok.batch(seqs)
    rc_ids, _ = tok.batch([reverse_complement(s) for s in seqs])
    posthoc, conjoined, plain = (small_net(rc_mode=m) for m in ("posthoc", "conjoin", "none"))
    torch.testing.assert_close(posthoc(ids, lengths), conjoined(ids, lengths))
    invariant = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(posthoc(ids, lengths), posthoc(rc_ids, lengths), **invariant)
    posthoc.train()
    plain.train()
    torch.testing.assert_close(posthoc(ids, lengths), plain(ids, lengths))
    assert not torch.allclose(posthoc(ids, lengths), posthoc(rc_ids, lengths))


@pytest.mark.parametrize("rc_mode", ["augment", "posthoc"])
def test_training_flips_strands_at_random(rc_mode):
    """The task's training loss reads a random half of the batch as reverse complements
    for the strand-flipping modes; evaluation and rc_mode "none" read the given strand."""
    from titans_seq.domains.genomics.task import DNAClassificationTask

    seqs = ["ACGTTGCAAGT", "GGGATCAA", "TTACGGC", "CATGCATG"] * 4
    ids, lengths = DNATokenizer().batch(seqs)
    labels = torch.zeros(len(seqs), dtype=torch.long)
    seen = []

    class Recorder(torch.nn.Module):
        def __init__(self, mode):
            super().__init__()
            self.rc_mode, self.head = mode, torch.nn.Linear(1, 2)

        def forward(self, ids, lengths):
            seen.append(ids.clone())
            return self.head(torch.zeros(ids.shape[0], 1))

    task = DNAClassificationTask()
    torch.manual_seed(0)
    for mode, training in ((rc_mode, True), (rc_mode, False), ("none", True)):
        task.loss(Recorder(mode).train(training), (ids, lengths, labels))
    flipped, evaluated, plain = seen
    rc = reverse_complement_ids(ids, lengths)
    is_flipped = (flipped == rc).all(1) & ~(flipped == ids).all(1)
    assert 0 < int(is_flipped.sum()) < len(seqs)
    assert ((flipped == ids).all(1) | is_flipped).all()
    assert torch.equal(evaluated, ids) and torch.equal(plain, ids)


def test_bidirectional_encoder_sees_the_whole_sequence():
    tok = DNATokenizer()
    ids, lengths = tok.batch(["ACGTACGTAC"])
    changed = ids.clone()
    changed[0, -1] = 3
    for bidirectional, sees_future in ((True, True), (False, False)):
        net = small_net(bidirectional=bidirectional, rc_mode="none")
        first = net.encode(ids, lengths)[0][0, 0]
        first_changed = net.encode(changed, lengths)[0][0, 0]
        assert torch.allclose(first, first_changed) != sees_future


def test_views_read_in_one_batch_equal_separate_reads():
    """The directions and strands share one backbone call; the result is that of reading
    each view on its own (forward strand + its reversal, then the reverse complement)."""
    net = small_net(bidirectional=True, rc_mode="conjoin")
    ids, lengths = DNATokenizer().batch(["ACGTTGCAAGTCC", "GGGATC", "TTACG"])

    def separate(ids):
        forward, _ = net.backbone(net.embedding(ids))
        reversed_ids = reverse_within_length(ids, lengths)
        backwards, _ = net.backbone(net.embedding(reversed_ids))
        h = forward + reverse_within_length(backwards, lengths)
        mask = (torch.arange(ids.shape[1]) < lengths.unsqueeze(1)).to(h.dtype).unsqueeze(-1)
        return net.classifier((h * mask).sum(1) / lengths.unsqueeze(1))

    expected = 0.5 * (separate(ids) + separate(reverse_complement_ids(ids, lengths)))
    torch.testing.assert_close(net(ids, lengths), expected, rtol=1e-5, atol=1e-5)


def test_the_stem_reads_each_base_with_its_neighbours():
    """With a width-k stem, a base's change reaches the mixer's input at the k positions
    around it (and nowhere else); conjoined logits stay strand invariant."""
    net = small_net(stem_width=5, rc_mode="none", bidirectional=False)
    tok = DNATokenizer()
    ids, lengths = tok.batch(["ACGTACGGTACCA"])
    changed = ids.clone()
    changed[0, 6] = 1 + (int(ids[0, 6]) % 4)
    inputs = [net.stem(net.embedding(x), lengths)[0] for x in (ids, changed)]
    moved = (inputs[0] - inputs[1]).abs().sum(-1)[0] > 0
    assert moved.nonzero().flatten().tolist() == [4, 5, 6, 7, 8]
    conjoined = small_net(stem_width=5, rc_mode="conjoin")
    rc_ids, _ = tok.batch([reverse_complement("ACGTACGGTACCA")])
    torch.testing.assert_close(conjoined(ids, lengths), conjoined(rc_ids, lengths))


def reference_stem(stem: MotifStem, x: torch.Tensor, length: int) -> torch.Tensor:
    """MotifStem written out patch by patch for one sequence x [T, D] of `length` bases:
    patch j = mean of its bases' embeddings + GELU(conv weights . the `width` bases from
    j*stride - (width - stride) // 2, zero outside the sequence); patches past the end zero."""
    T, D = x.shape
    s, w = stem.stride, stem.width
    patches = -(-T // s)
    weight, bias = stem.conv.weight, stem.conv.bias  # [D, D, w], [D]
    out = torch.zeros(patches, D, dtype=torch.float64)
    for j in range(-(-length // s)):
        start = j * s - (w - s) // 2
        field = torch.stack(
            [
                x[i].double() if 0 <= i < length else torch.zeros(D, dtype=torch.float64)
                for i in range(start, start + w)
            ]
        )  # [w, D]
        conv = torch.einsum("oit,ti->o", weight.double(), field) + bias.double()
        own = [
            x[i].double() if i < length else torch.zeros(D, dtype=torch.float64)
            for i in range(j * s, j * s + s)
        ]
        out[j] = torch.stack(own).mean(0) + F.gelu(conv)
    return out


@pytest.mark.parametrize("width, stride", [(1, 1), (5, 1), (7, 2), (7, 4), (5, 5), (7, 7)])
@pytest.mark.parametrize("T, length", [(13, 13), (13, 9), (3, 2), (16, 16)])
def test_the_stem_matches_its_patch_by_patch_reference(width, stride, T, length):
    torch.manual_seed(0)
    stem = MotifStem(6, width, stride)
    x = torch.randn(2, T, 6)
    x[:, length:] = 0.0  # padding embeds to zero
    lengths = torch.tensor([length, T])
    h, patch_lengths = stem(x, lengths)
    assert h.shape == (2, -(-T // stride), 6)
    assert patch_lengths.tolist() == [-(-length // stride), -(-T // stride)]
    for b in range(2):
        expected = reference_stem(stem, x[b], int(lengths[b]))
        torch.testing.assert_close(h[b].double(), expected, rtol=1e-5, atol=1e-5)


def test_a_patching_stem_shortens_what_the_mixer_reads():
    """At stride 4 the mixer reads a quarter of the positions, and a base's change reaches
    only the patches whose field holds it."""
    net = small_net(stem_width=7, stem_stride=4, rc_mode="none", bidirectional=False)
    tok = DNATokenizer()
    ids, lengths = tok.batch(["ACGTACGGTACCAGT"])
    changed = ids.clone()
    changed[0, 9] = 1 + (int(ids[0, 9]) % 4)
    inputs = [net.stem(net.embedding(x), lengths)[0] for x in (ids, changed)]
    assert inputs[0].shape[1] == 4
    moved = (inputs[0] - inputs[1]).abs().sum(-1)[0] > 0
    # patch j reads bases [4j - 1, 4j + 6): base 9 is in the fields of patches 1 and 2
    assert moved.nonzero().flatten().tolist() == [1, 2]


def test_bad_options():
    with pytest.raises(ValueError, match="stem_width"):
        small_net(stem_width=4)
    with pytest.raises(ValueError, match="stem_stride"):
        small_net(stem_width=5, stem_stride=6)
    with pytest.raises(ValueError, match="rc_mode"):
        small_net(rc_mode="both")
    with pytest.raises(ValueError, match="2 classes"):
        small_net(num_classes=1)
