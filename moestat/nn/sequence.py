"""The sparse-gating study's sequence models (Datta (2024), Secs. B1, B5): a BiLSTM with an expert
layer or an MoE layer in the middle.

``embedding -> BiLSTM(h) -> expert layer -> BiLSTM(h) -> linear head``

* **Embedding**: GloVe rows when given (PAD row zero, UNK row GloVe's mean vector; see
  :mod:`moestat.data.text_tasks`), else drawn ``N(0, 0.1^2)`` from the seed; trainable (the study does
  not say whether it froze them; ``freeze_embeddings=True`` freezes).
* **Expert** (one hidden layer of 128, ReLU, dropout 0.5 at the end):
  ``Linear(2h, 128) -> ReLU -> Linear(128, 2h) -> Dropout(0.5)``, the usual reading of the study.
* **Expert layer**: the baseline has one expert; an MoE layer is :class:`moestat.nn.layer.MoELayer`
  with ``M`` such experts (its :class:`~moestat.nn.expert_mlp.ExpertMLP`) and a router of
  :mod:`moestat.nn.routers`; the output is ``sum_i G_i(x) E_i(x)`` per token (:data:`GATES`).
  Only real tokens go through it, so padding never enters the balancing losses (B3, inferred).
* **Head**: ``Linear(2h, n_tags)`` per token (NER), or ``Linear(2h, 1)`` for spans: context and
  question (each padded to ``L``) are concatenated, the ``2L`` scalars are split in half into ``L``
  start and ``L`` end logits (the study's "split", read literally; Datta (2024) B4, inferred).

For tagging the LSTMs run over packed sequences (each sentence's true length), so a batch may be
trimmed to its longest sentence without changing any number; for spans the padded ``2L`` sequence
is read as the study describes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from moestat.data.text_tasks import IGNORE_INDEX, PAD
from moestat.nn.layer import MoELayer
from moestat.seeding import torch_generator

__all__ = ["GATES", "SequenceMoE", "SequenceOutput", "sequence_loss"]

#: The study's six models: name -> (router of :data:`moestat.nn.routers.LAYER_ROUTERS` or None for
#: the single-expert baseline, router keyword arguments).  Weights 0.1 as in Datta (2024) B3.
GATES: dict[str, tuple[str | None, dict]] = {
    "baseline": (None, {}),
    "naive": ("naive_topk", {}),
    "mask": ("topk_mask", {}),
    "noisy": ("noisy_topk", {}),
    "importance": ("topk_mask", {"w_importance": 0.1}),
    "load": ("noisy_topk", {"w_load": 0.1}),
}


@dataclass
class SequenceOutput:
    """Forward quantities of :class:`SequenceMoE` for ``b`` sequences of length ``L``.

    Attributes
    ----------
    logits : Tensor
        ``[b, L, n_tags]`` (tagging) or ``[b, 2, L/2]`` start and end logits (spans).
    weights, probs : Tensor ``[t, M]``
        Combination weights and full softmax of the router for the ``t`` real tokens (``M = 1``
        and all ones for the baseline).
    mask : BoolTensor ``[t, M]``
        Experts selected for each real token.
    aux_loss : Tensor, scalar
        Balancing losses (0 without them).
    token_mask : BoolTensor ``[b, L]``
        Real (non-PAD) tokens.
    """

    logits: torch.Tensor
    weights: torch.Tensor
    probs: torch.Tensor
    mask: torch.Tensor
    aux_loss: torch.Tensor
    token_mask: torch.Tensor


class SequenceMoE(nn.Module):
    """BiLSTM -> expert or MoE layer -> BiLSTM -> head (module docstring).

    Parameters
    ----------
    vocab_size : int
    n_outputs : int
        Tags per token (tagging); 1 for the span head.
    gate : str
        One of :data:`GATES`.
    task : {"tagging", "spans"}
    embeddings : Tensor ``[vocab_size, e]``, optional
        Initial embedding rows (GloVe); else ``embedding_dim`` rows drawn from the seed.
    embedding_dim, lstm_hidden, expert_hidden : int
        ``e`` (50 = GloVe 6B 50d), ``h`` (128) and the expert's hidden width (128).
    n_experts, k : int
        ``M = 8``, ``k = 2`` in the study.
    dropout : float
        Dropout at the end of each expert (0.5).
    freeze_embeddings : bool
    random_state : int or SeedSequence
        Seeds the initialisation and, in a separate stream, the routing noise of ``noisy_topk``.
    """

    def __init__(self, vocab_size: int, n_outputs: int, gate: str = "baseline", *, task: str = "tagging",
                 embeddings: torch.Tensor | None = None, embedding_dim: int = 50, lstm_hidden: int = 128,
                 expert_hidden: int = 128, n_experts: int = 8, k: int = 2, dropout: float = 0.5,
                 freeze_embeddings: bool = False, random_state=0) -> None:
        super().__init__()
        if gate not in GATES:
            raise ValueError(f"unknown gate {gate!r}; expected one of {', '.join(GATES)}")
        if task not in ("tagging", "spans"):
            raise ValueError(f"task must be 'tagging' or 'spans', got {task!r}")
        if not 1 <= k <= n_experts:
            raise ValueError(f"k must be between 1 and n_experts={n_experts}, got {k}")
        self.gate, self.task = gate, task
        gen = torch_generator(random_state)
        # torch's LSTM / Linear initialisers use the global generator: fork it so the model's
        # draw depends on the seed only and leaves the caller's stream untouched
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
            if embeddings is not None:
                self.embedding = nn.Embedding.from_pretrained(embeddings.float(), freeze=freeze_embeddings,
                                                              padding_idx=PAD)
            else:
                w = torch.randn(vocab_size, embedding_dim) * 0.1
                w[PAD] = 0.0
                self.embedding = nn.Embedding.from_pretrained(w, freeze=freeze_embeddings, padding_idx=PAD)
            e = self.embedding.embedding_dim
            d = 2 * lstm_hidden
            self.lstm1 = nn.LSTM(e, lstm_hidden, batch_first=True, bidirectional=True)
            self.lstm2 = nn.LSTM(d, lstm_hidden, batch_first=True, bidirectional=True)
            self.head = nn.Linear(d, n_outputs)
        router, kw = GATES[gate]
        self.moe = MoELayer(d, d, 1 if router is None else n_experts, task="regression",
                            expert_hidden=(expert_hidden,), router=router or "dense",
                            k=None if router is None else k, router_kwargs=kw, init_order="gate_first",
                            random_state=gen)
        self.expert_dropout = nn.Dropout(dropout)
        self._noise_gen = torch_generator(int(torch.randint(2**62, (1,), generator=gen)))
        if hasattr(self.moe.router, "set_generator"):
            self.moe.router.set_generator(self._noise_gen)

    def _lstm(self, lstm: nn.LSTM, h: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        if lengths is None:
            return lstm(h)[0]
        packed = pack_padded_sequence(h, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=h.shape[1])[0]

    def forward(self, x: torch.Tensor) -> SequenceOutput:  # noqa: D401 - nn.Module API
        """Logits and router quantities for token ids ``x`` ``[b, L]`` (PAD = 0)."""
        if x.ndim != 2:
            raise ValueError(f"x must be token ids of shape [b, L], got {tuple(x.shape)}")
        token_mask = x != PAD
        lengths = token_mask.sum(1).clamp(min=1) if self.task == "tagging" else None
        h = self._lstm(self.lstm1, self.embedding(x), lengths)  # [b, L, 2h]
        tokens = h[token_mask]  # [t, 2h]: padding stays out of the experts and the balancing losses
        out = self.moe(tokens)
        y = (out.weights.unsqueeze(-1) * self.expert_dropout(out.expert_out)).sum(1)  # sum_i G_i E_i
        mid = torch.zeros_like(h).masked_scatter(token_mask.unsqueeze(-1), y)
        logits = self.head(self._lstm(self.lstm2, mid, lengths))
        if self.task == "spans":
            L = x.shape[1] // 2
            logits = logits.squeeze(-1).reshape(x.shape[0], 2, L)  # first half start, second half end
        return SequenceOutput(logits, out.weights, out.probs, out.mask, out.aux_loss, token_mask)


def sequence_loss(out: SequenceOutput, y: torch.Tensor) -> torch.Tensor:
    """Task cross-entropy (padded tags ignored via -100; for spans CE(start) + CE(end)) plus the
    router's balancing losses (Datta (2024) B3, "total loss", inferred)."""
    if out.logits.ndim == 3 and y.ndim == 2 and y.shape[1] == 2 and out.logits.shape[1] == 2:
        task = F.cross_entropy(out.logits[:, 0], y[:, 0]) + F.cross_entropy(out.logits[:, 1], y[:, 1])
    else:
        task = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX)
    return task + out.aux_loss
