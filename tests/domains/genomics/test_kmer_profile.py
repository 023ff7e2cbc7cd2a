"""The k-mer profile head: the counts a k-mer model reads (checked against scikit-learn's),
free of padding and strand, and its place in the classifier."""

import itertools

import numpy as np
import pytest
import torch
from sklearn.feature_extraction.text import CountVectorizer

from titans_seq.domains.genomics import DNATokenizer, reverse_complement
from titans_seq.domains.genomics.kmer_profile import KmerProfileHead, kmer_profile
from titans_seq.domains.genomics.model import DNAClassifierNet

SEQUENCES = ["ACGTACGTTTGACNACGGA", "GGGCCCATTG", "ACG", "NNNNACGTN", "T"]


def sklearn_profile(sequences: list[str], k: int) -> np.ndarray:
    """Counts of the k-mers of both strands (windows with N skipped), L2-normalised."""
    vocabulary = ["".join(t) for t in itertools.product("ACGT", repeat=k)]
    counter = CountVectorizer(
        analyzer="char", ngram_range=(k, k), lowercase=False, vocabulary=vocabulary
    )
    both = [s + " " + reverse_complement(s) for s in sequences]
    counts = counter.transform(both).toarray().astype(np.float64)
    norms = np.linalg.norm(counts, axis=1, keepdims=True)
    return counts / np.where(norms == 0, 1.0, norms)


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_the_profile_is_the_k_mer_model_s_features(k):
    ids, lengths = DNATokenizer().batch(SEQUENCES)
    profile = kmer_profile(ids, lengths, k)
    assert profile.shape == (len(SEQUENCES), 4**k)
    np.testing.assert_allclose(profile.numpy(), sklearn_profile(SEQUENCES, k), atol=1e-6)


def test_a_batch_shorter_than_k_has_an_empty_profile():
    ids, lengths = DNATokenizer().batch(["AC", "G"])
    assert kmer_profile(ids, lengths, 3).abs().sum() == 0


def test_the_profile_reads_neither_padding_nor_strand():
    tok = DNATokenizer()
    ids, lengths = tok.batch(["GATTACAGGA", "CCGTA"])
    alone_ids, alone_lengths = tok.batch(["CCGTA"])
    torch.testing.assert_close(
        kmer_profile(ids, lengths, 3)[1:], kmer_profile(alone_ids, alone_lengths, 3)
    )
    rc_ids, _ = tok.batch([reverse_complement(s) for s in ["GATTACAGGA", "CCGTA"]])
    torch.testing.assert_close(kmer_profile(ids, lengths, 4), kmer_profile(rc_ids, lengths, 4))


def test_the_head_starts_at_zero_and_learns_a_motif():
    """Untrained, its logits are zero (the classifier starts as its backbone); a few
    steps separate sequences that carry a motif from those that do not."""
    rng = np.random.default_rng(0)
    background = ["".join(rng.choice(list("ACT"), size=40)) for _ in range(32)]
    with_motif = [s[:10] + "GGGG" + s[14:] for s in background[:16]]
    sequences, labels = with_motif + background[16:], torch.tensor([1] * 16 + [0] * 16)
    ids, lengths = DNATokenizer().batch(sequences)
    torch.manual_seed(0)
    head = KmerProfileHead(4, 2)
    assert head(ids, lengths).abs().max() == 0
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    for _ in range(50):
        loss = torch.nn.functional.cross_entropy(head(ids, lengths), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (head(ids, lengths).argmax(1) == labels).all()


@pytest.mark.parametrize("rc_mode", ["none", "posthoc", "conjoin"])
def test_the_classifier_adds_the_head_s_logits(rc_mode):
    torch.manual_seed(0)
    options = dict(num_classes=3, dim=16, depth=1, heads=2, dropout=0.0, rc_mode=rc_mode)
    net = DNAClassifierNet(**options, kmer_size=3).eval()
    torch.nn.init.normal_(net.kmer.linear.weight)
    ids, lengths = DNATokenizer().batch(["ACGTTGCAAGT", "GGGATC"])
    expected = net.backbone_logits(ids, lengths) + net.kmer(ids, lengths)
    torch.testing.assert_close(net(ids, lengths), expected)
    assert not torch.allclose(net.kmer(ids, lengths), torch.zeros(2, 3))
