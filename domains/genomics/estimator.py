"""`DNAClassifier`: a scikit-learn classifier of DNA sequences with any titans-seq mixer.

    clf = DNAClassifier(mixer="lmm").fit(sequences, labels)
    clf.predict(["ACGT..."]); clf.predict_proba("more.fa.gz"); clf.score(X_test, y_test)

X: a list of str, Bio.Seq / SeqRecord objects, or a FASTA/FASTQ path (plain or .gz, read with
Biopython). Labels may be strings or integers; `classes_` holds them sorted. Training goes
through the shared loop with the `dna_classification` task.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from titans_seq.checks import check_int, check_number
from titans_seq.data import DataError
from titans_seq.errors import ConfigError
from titans_seq.training.in_memory import (
    EstimatorTraining,
    estimator_device,
    fit_in_memory,
    load_described_weights,
    load_fitted,
    save_fitted,
    saved_mixer_options,
)

from .cheap_models import (
    CHEAP_MODELS,
    KMER,
    LENGTH,
    MEMBERS,
    NETWORK,
    choose_member,
    fit_cheap_model,
)
from .labels import check_labels
from .task import DNAClassificationTask, DNAModelConfig, TokenBatches, build_net
from .tokenizer import DNATokenizer

CONFIG_FILE = "dna_classifier.json"
# 2: the memory's stable parametrisation; 3: theta_max no longer follows the chunk size;
# 4: MAL's layout "two_layers" (older versions are read with the defaults they were saved
# under, see load); 5: stem_width (older versions have no stem); 6: kmer_size (older
# versions have no k-mer head); 7: stem_stride (older versions read every base); 8: max_len
# "auto" and the fitted max_len_ (older versions saved an integer max_len, their max_len_);
# 9: baselines and the chosen member (older versions predict with the network)
FORMAT_VERSION = 9
# format version -> the generation of mixer defaults it was saved under (`pin_saved_defaults`)
DEFAULTS_GENERATION_OF_VERSION = {1: 1, 2: 2, 3: 3, 4: 4, 5: 4, 6: 4, 7: 4, 8: 4, 9: 4}
STEM_WIDTH = 7
# bases per position the mixer reads: at 1,000 training sequences stride 4 kept the accuracy
# of stride 1 within the seeds' spread (Cohn 0.706 against 0.708, NonTATA 0.830 against
# 0.837) for a quarter of the mixer's work, a training step 4.4x faster on CPU
STEM_STRIDE = 4
KMER_SIZE = 6
AUTO = "auto"
# under max_len="auto", the bases of a sequence a training step reads at most: training
# keeps every layer's activations for the backward, about 5.7 GB for a batch of 32
# sequences of 20,000 bases at the defaults on a CPU, so a bound keeps a default fit on
# long sequences (a batch of 32 x 8,192 bases) within a laptop's memory; predict, which
# keeps none, reads every sequence whole
AUTO_TRAINING_LEN = 8192


FASTA_SUFFIXES = {".fa", ".fasta", ".fna", ".fq", ".fastq", ".gz"}


def as_sequences(X) -> tuple[list[str], list[str]]:
    """(sequences, names) from a list of str/Seq/SeqRecord or a FASTA/FASTQ path."""
    if isinstance(X, (str, Path)) and Path(X).suffix.lower() in FASTA_SUFFIXES:
        if not Path(X).is_file():
            raise FileNotFoundError(f"the FASTA/FASTQ file {X} does not exist")
        from titans_seq.data.sequences import load_fasta

        fmt = "fastq" if any(s in Path(X).name.lower() for s in (".fq", ".fastq")) else None
        data = load_fasta(X, label_key=None, format=fmt)
        return list(data.sequences), list(data.names)
    if isinstance(X, (str, bytes)):
        raise TypeError(
            "X must be a list of sequences or a path to an existing FASTA/FASTQ file "
            f"(.fa/.fasta/.fq/.fastq, optionally .gz); got the string {str(X)[:40]!r}"
        )
    sequences, names = [], []
    for i, item in enumerate(X):
        name = getattr(item, "id", None) or f"sequence {i}"
        seq = getattr(item, "seq", item)  # SeqRecord -> Seq
        if isinstance(seq, bytes):  # numpy "S" arrays and HDF5 strings hold bytes
            try:
                seq = seq.decode("ascii")
            except UnicodeDecodeError:
                raise DataError(f"X[{i}] holds bytes that are not ASCII: {seq[:40]!r}") from None
        if not isinstance(seq, str) and type(seq).__name__ != "Seq":
            raise DataError(
                f"X[{i}] is {repr(seq)[:60]} ({type(seq).__name__}); every item must be a DNA "
                "sequence (str, bytes, Bio.Seq or SeqRecord): drop or fill missing entries first"
            )
        sequences.append(str(seq))
        names.append(str(name))
    if not sequences:
        raise DataError("X holds no sequences")
    return sequences, names


class DNAClassifier(ClassifierMixin, BaseEstimator):
    """Embedding -> Backbone (any mixer) -> masked mean pool -> linear, as a classifier.

    Parameters:
        architecture: "backbone" (embedding -> Backbone(mixer) -> pooled linear; with
            mixer="attention" the Transformer baseline) or "cnn" (the GenomicsBenchmarks CNN
            baseline; dim/depth/heads/mixer are then unused, its input length is max_len_).
        pretrained: None, or a pretrained folder (from `pretrain`, `save_pretrained` or a
            `dna_pretraining` run): the embedding and backbone start from its weights, the
            classifier head is fresh. The architecture (dim, depth, heads, mixer,
            mixer_options) must match it, else fit raises a ValueError naming the keys.
        mixer, mixer_options, dim, depth, heads: the backbone.
        bidirectional: also read each sequence backwards (weight-tied); a second pass.
        rc_mode: "posthoc" (random strand flips during training, one pass per sequence;
            predictions and validation average both strands, so they do not depend on the
            strand), "augment" (the same training; predictions read the given strand only,
            at half the prediction cost), "conjoin" (both strands in training too: a second
            pass per step) or "none". The defaults train on one pass per sequence: at the
            same number of passes over the data, one pass for 4x the epochs matched or beat
            both directions x both strands on the mirrored GenomicsBenchmarks tasks, in less
            time, and averaging both strands at prediction made the same fitted models
            0.003-0.005 more accurate on average (docs/benchmarks.md, "Genomics").
        stem_width: the width of a residual convolution between the embedding and the
            backbone (odd; 0: none), so the mixer starts from k-mer features; "auto": 7, or
            0 with `pretrained` (whose backbone was trained without one).
        stem_stride: bases per position the backbone reads: the stem also cuts each
            sequence into patches of this many bases (at most stem_width), so the mixer walks
            a sequence this many times shorter (1: every base); "auto": 4 with a stem (at
            most its width), else 1. Pooling and predictions stay independent of padding.
        kmer_size: k of a linear read-out of the sequence's k-mer counts (both strands,
            L2-normalised: the k-mer model a user fits first) whose logits are added to the
            backbone's, both trained together (0: none); "auto": 6.
        max_len: "auto" (the default): fit reads the first AUTO_TRAINING_LEN (8,192) bases
            of longer sequences, with a warning (training memory grows with the length),
            and the backbone's predict reads every sequence whole; the CNN's fixed input
            length is the longest training sequence read (as the GenomicsBenchmarks CNN is
            built for each dataset), and longer sequences given to its predict are
            truncated to it, with a warning. An integer: sequences longer than it are
            truncated to their first max_len bases, with a warning, in fit and predict,
            and it is the CNN's input length.
        strict: reject IUPAC ambiguity codes instead of mapping them to N.
        baselines: "auto" compares the trained network on the validation share with the two
            models a user fits first, 6-mer counts with a logistic regression and a depth-3
            decision tree on the sequence's length (each fitted on the training share in
            about a second), and predicts with a cheap one, refitted on every sequence,
            where it is right on two standard errors more of the validation sequences the
            two classify differently than the network is (McNemar's comparison; where
            classes differ in length, which the network is built not to see, or where a
            few hundred sequences are too few for it); None: the network alone.
        max_epochs, batch_size, learning_rate, validation_fraction, patience: training
            (AdamW, warmup + cosine, early stopping on a stratified validation share).
        device: "auto" (CUDA when available), "cpu", ...; random_state: seed (None = 0).

    Fitted attributes: model_, classes_, n_classes_, history_, device_, max_len_ (the
    integer max_len, or under "auto" the longest training sequence read, in bases: the
    CNN's input length), member_ (what predicts: "network", "kmer" or "length"),
    member_accuracies_ ({member: validation accuracy} where "auto" compared them; else
    None), baseline_model_ (the chosen cheap model, or None).
    """

    def __init__(
        self,
        mixer: str = "lmm",
        architecture: str = "backbone",
        pretrained: str | None = None,
        mixer_options: dict | None = None,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        bidirectional: bool = False,
        rc_mode: str = "posthoc",
        stem_width: int | str = "auto",
        stem_stride: int | str = "auto",
        kmer_size: int | str = "auto",
        max_len: int | str = "auto",
        strict: bool = False,
        baselines: str | None = "auto",
        max_epochs: int = 20,
        batch_size: int = 32,
        learning_rate: float = 1e-3,
        validation_fraction: float = 0.1,
        patience: int = 3,
        device: str = "auto",
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.mixer = mixer
        self.architecture = architecture
        self.pretrained = pretrained
        self.mixer_options = mixer_options
        self.dim = dim
        self.depth = depth
        self.heads = heads
        self.bidirectional = bidirectional
        self.rc_mode = rc_mode
        self.stem_width = stem_width
        self.stem_stride = stem_stride
        self.kmer_size = kmer_size
        self.max_len = max_len
        self.strict = strict
        self.baselines = baselines
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        # X is a collection of DNA strings (or a FASTA path), not a [n_samples, n_features]
        # array: scikit-learn's common checks feed numeric 2-D arrays, so it skips them, and
        # tests/domains/test_sklearn_conformance.py runs the ones that apply with sequences.
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.one_d_array = True
        tags.input_tags.string = True
        return tags

    def _model_config(self, num_classes: int) -> DNAModelConfig:
        return DNAModelConfig(
            dim=self.dim,
            depth=self.depth,
            heads=self.heads,
            mixer=self.mixer,
            mixer_options=dict(self.mixer_options or {}),
            bidirectional=self.bidirectional,
            rc_mode=self.rc_mode,
            stem_width=self._stem_width(),
            stem_stride=self._stem_stride(),
            kmer_size=KMER_SIZE if self.kmer_size == AUTO else self.kmer_size,
            num_classes=num_classes,
            architecture=self.architecture,
            pretrained=None if self.pretrained is None else str(self.pretrained),
        )

    def _stem_width(self) -> int:
        """stem_width, with "auto" as STEM_WIDTH for a fresh backbone and 0 for a pretrained
        one (its weights were trained on the embeddings without a stem)."""
        if self.stem_width == AUTO:
            return 0 if self.pretrained is not None else STEM_WIDTH
        return self.stem_width

    def _stem_stride(self) -> int:
        """stem_stride, with "auto" as STEM_STRIDE where there is a stem and 1 where there
        is none (a pretrained backbone reads every base)."""
        if self.stem_stride == AUTO:
            return min(STEM_STRIDE, self._stem_width()) or 1
        return self.stem_stride

    def _training_settings(self) -> EstimatorTraining:
        return EstimatorTraining(
            self.max_epochs,
            self.batch_size,
            self.learning_rate,
            self.patience,
            self.random_state,
            self.device,
            self.verbose,
        )

    def _check_params(self) -> EstimatorTraining:
        """Every parameter checked before any sequence is read (the message names it);
        returns the training settings."""
        if isinstance(self.max_len, str) and self.max_len != AUTO:
            raise ConfigError(f"max_len must be 'auto' or a positive integer, got {self.max_len!r}")
        if self.max_len != AUTO:
            check_int("max_len", self.max_len, 1)
        if self.baselines not in (AUTO, None):
            raise ConfigError(f"baselines must be 'auto' or None, got {self.baselines!r}")
        check_number("validation_fraction", self.validation_fraction, low=0.0)
        if self.validation_fraction >= 1.0:
            raise ConfigError(
                f"validation_fraction must be a number in [0, 1), got {self.validation_fraction}"
            )
        settings = self._training_settings()
        self._model_config(num_classes=2)  # dim, depth, heads, mixer, rc_mode, architecture
        return settings

    def _encode(self, X, limit: int | None, why: str = "max_len"):
        """(ids [N, T], lengths [N]), sequences longer than `limit` bases (None: no limit)
        truncated to their first `limit` (warned about, naming `why` the limit holds)."""
        sequences, names = as_sequences(X)
        tokenizer = DNATokenizer(strict=self.strict)
        too_long = 0 if limit is None else sum(len(s) > limit for s in sequences)
        if too_long:
            warnings.warn(
                f"{too_long} sequence(s) longer than {limit} bases ({why}) were truncated "
                f"to their first {limit} bases",
                stacklevel=3,
            )
        ids, lengths = tokenizer.batch(sequences, names, max_len=limit)
        return ids, lengths

    def _prediction_limit(self) -> tuple[int | None, str]:
        """(the length predict truncates to, what it is): max_len_ where it is the CNN's
        input length or the user's max_len, else none (the backbone reads any length)."""
        if self.max_len != AUTO:
            return self.max_len_, "max_len"
        if self.architecture == "cnn":
            return self.max_len_, "the CNN's input length, max_len_"
        return None, ""

    def fit(self, X, y):
        """Fit on sequences X (see the class docstring) and labels y (str or int)."""
        settings = self._check_params()
        if self.max_len == AUTO:
            why = (
                f"max_len='auto' trains on at most {AUTO_TRAINING_LEN} bases of a sequence; "
                "an integer max_len sets the bound"
            )
            ids, lengths = self._encode(X, AUTO_TRAINING_LEN, why)
            self.max_len_ = int(lengths.max())
        else:
            ids, lengths = self._encode(X, int(self.max_len))
            self.max_len_ = int(self.max_len)
        y = check_labels(y, len(ids))
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise DataError(f"y holds a single class {self.classes_.tolist()}; need at least 2")
        self.n_classes_ = len(self.classes_)
        labels = torch.as_tensor(labels, dtype=torch.long)

        # stratified hold-out for early stopping (deterministic in random_state)
        rng = np.random.default_rng(0 if self.random_state is None else self.random_state)
        val_index = []
        for c in range(self.n_classes_):
            members = np.flatnonzero(labels.numpy() == c)
            take = int(round(len(members) * self.validation_fraction))
            val_index += rng.choice(
                members, size=min(take, len(members) - 1), replace=False
            ).tolist()
        val_mask = np.zeros(len(labels), dtype=bool)
        val_mask[val_index] = True
        train_set = TokenBatches(ids[~val_mask], lengths[~val_mask], labels[~val_mask])
        val_set = (
            TokenBatches(ids[val_mask], lengths[val_mask], labels[val_mask]) if val_index else None
        )

        model_cfg = self._model_config(self.n_classes_)
        self.model_, result, _ = fit_in_memory(
            DNAClassificationTask(train_set, val_set),
            "dna_classification",
            model=dataclasses.asdict(model_cfg),
            data={"max_len": self.max_len_},
            num_train=len(train_set),
            has_validation=val_set is not None,
            settings=settings,
            # receives the best weights: no need to load the pretrained ones first
            build_model=lambda: build_net(model_cfg, self.max_len_),
        )
        self.device_ = estimator_device(self.device)
        self.history_ = result.history
        self.member_, self.member_accuracies_, self.baseline_model_ = NETWORK, None, None
        if self.baselines == AUTO and val_index:
            self._choose_member(ids, lengths, labels.numpy(), val_mask)
        return self

    def _choose_member(self, ids, lengths, labels: np.ndarray, val_mask: np.ndarray) -> None:
        """member_, member_accuracies_ and baseline_model_: the network against the cheap
        models on the validation share (`cheap_models.choose_member`)."""
        seed = 0 if self.random_state is None else self.random_state
        train, val = torch.from_numpy(~val_mask), torch.from_numpy(val_mask)
        truth = labels[val_mask]
        correct = {NETWORK: self._network_proba(ids[val], lengths[val]).argmax(axis=1) == truth}
        candidates = [KMER] + ([LENGTH] if len(set(lengths.tolist())) > 1 else [])
        for name in candidates:
            cheap = fit_cheap_model(name, ids[train], lengths[train], labels[~val_mask],
                                    self.n_classes_, seed)  # fmt: skip
            correct[name] = cheap.proba(ids[val], lengths[val]).argmax(axis=1) == truth
        self.member_accuracies_ = {name: float(right.mean()) for name, right in correct.items()}
        self.member_ = choose_member(correct)
        if self.member_ != NETWORK:  # refitted on every sequence, as the network saw them
            self.baseline_model_ = fit_cheap_model(self.member_, ids, lengths, labels,
                                                   self.n_classes_, seed)  # fmt: skip

    @torch.no_grad()
    def _network_proba(self, ids: torch.Tensor, lengths: torch.Tensor, batch_size: int = 128):
        """The network's class probabilities [N, n_classes] of ids [N, T], lengths [N]."""
        data = TokenBatches(ids, lengths, torch.zeros(len(ids), dtype=torch.long))
        # batches of similar lengths (little padding), the rows put back in input order
        order = torch.sort(lengths, stable=True).indices
        proba = torch.empty(len(ids), self.n_classes_)
        for start in range(0, len(data), batch_size):
            rows = order[start : start + batch_size]
            batch_ids, batch_len, _ = data.get_batch(rows.tolist())
            logits = self.model_(batch_ids.to(self.device_), batch_len.to(self.device_))
            proba[rows] = torch.softmax(logits.float(), dim=-1).cpu()
        return proba.numpy()

    @torch.no_grad()
    def predict_proba(self, X, batch_size: int = 128) -> np.ndarray:
        """Class probabilities [N, n_classes] (rows sum to 1, columns in classes_ order)."""
        check_is_fitted(self, "model_")
        ids, lengths = self._encode(X, *self._prediction_limit())
        if self.member_ != NETWORK:
            return self.baseline_model_.proba(ids, lengths)
        return self._network_proba(ids, lengths, batch_size)

    def predict(self, X) -> np.ndarray:
        """The most probable class of each sequence (labels as given to fit)."""
        check_is_fitted(self, "model_")  # before classes_ is read: NotFittedError first
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    def save(self, path):
        """Write `path/` with model.safetensors + dna_classifier.json (no pickle)."""
        check_is_fitted(self, "model_")
        meta = {
            "format_version": FORMAT_VERSION,
            "params": self.get_params(),
            "classes": self.classes_.tolist(),
            "history": self.history_,
            "max_len_": self.max_len_,
            "member": self.member_,
            "member_accuracies": self.member_accuracies_,
            "baseline_model": (
                None if self.baseline_model_ is None else self.baseline_model_.state()
            ),
        }
        return save_fitted(path, self.model_, meta, CONFIG_FILE)

    @classmethod
    def load(cls, path, device: str | None = None, allow_unverified: bool = False) -> DNAClassifier:
        """Rebuild a saved classifier (weights via safetensors; never unpickles).

        allow_unverified: load a folder that has no manifest (saved before manifests, or
        whose manifest was removed), trusting that its files were not edited."""
        meta, weights = load_fitted(
            path, CONFIG_FILE, "DNAClassifier", FORMAT_VERSION, allow_unverified
        )
        params = meta["params"]
        version = meta["format_version"]
        if version < FORMAT_VERSION and params.get("architecture", "backbone") == "backbone":
            # trained under earlier mixer defaults
            params["mixer_options"] = saved_mixer_options(
                params["mixer"],
                params.get("mixer_options"),
                generation=DEFAULTS_GENERATION_OF_VERSION[version],
            )
        if version < 5:
            params = {**params, "stem_width": 0}
        if version < 6:
            params = {**params, "kmer_size": 0}
        if version < 7:
            params = {**params, "stem_stride": 1}
        clf = cls(**params)
        clf.classes_ = np.asarray(meta["classes"])
        clf.n_classes_ = len(clf.classes_)
        clf.history_ = meta["history"]
        # before version 8 max_len was an integer, and the CNN's input length
        clf.max_len_ = int(meta.get("max_len_", params["max_len"]))
        # before version 9 the network alone predicted
        clf.member_, clf.baseline_model_ = read_member(meta, Path(path) / CONFIG_FILE)
        clf.member_accuracies_ = meta.get("member_accuracies")
        model = build_net(clf._model_config(clf.n_classes_), clf.max_len_)
        load_described_weights(model, weights, Path(path) / CONFIG_FILE, WEIGHT_FIELDS)
        clf.device_ = estimator_device(device or clf.device)
        clf.model_ = model.to(clf.device_).eval()
        return clf


def read_member(meta: dict, source: Path):
    """(member_, baseline_model_) of a saved classifier's config, checked: a DataError
    names a member or a cheap model's arrays that the file does not hold as it should."""
    member = meta.get("member", NETWORK)
    if member not in MEMBERS:
        raise DataError(f"{source}: member {member!r} is none of {list(MEMBERS)}")
    if member == NETWORK:
        return member, None
    state = meta.get("baseline_model")
    try:
        return member, CHEAP_MODELS[member].from_state(state)
    except (KeyError, TypeError, ValueError):
        raise DataError(
            f"{source}: member is {member!r} but baseline_model does not hold its arrays"
        ) from None


# which fields of dna_classifier.json shape which weights (for an error naming the field)
WEIGHT_FIELDS = {
    "classifier.weight": ("classes", "dim"),
    "classifier.bias": "classes",
    "kmer.linear.weight": ("classes", "kmer_size"),
    "kmer.linear.bias": "classes",
    "embedding.weight": ("the tokenizer (k)", "dim"),
}
