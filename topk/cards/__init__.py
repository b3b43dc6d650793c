"""Protocol cards: every result-affecting value of an experiment, with where it comes from.

A card is ``topk/cards/<experiment>.yaml``. It lists, under ``keys``, every key of the flat
composed config of the experiment's jobs that changes what a run learns or reports, with its value
and its source; ``facts`` adds protocol facts that live in code rather than in a config key (the
normalisation constants, how a split is drawn). A card may start from shared fragments
(``uses: [cifar100_g22]`` reads ``topk/cards/common/cifar100_g22.yaml``, its ``keys`` and its
``facts``); its own entries replace a fragment's entry of the same key whole. A fragment shared by
cards that sweep different values (``losses.yaml`` has a case for every loss) keeps, on each card,
only its cases for values that card sweeps: a case ``when: {loss: [ce, hinge]}`` on a card sweeping
``loss: [ce, focal]`` reads ``when: {loss: ce}``, and a case for ``hinge`` alone is left out.

An entry is a mapping, or a list of mappings when the value depends on the job::

    optim.lr:
      - when: {loss: ce}                  # the swept values this case applies to
        value: 0.1
        source: cited                     # cited | code | inferred | choice
        ref: B18 §5.2                     # paper and section / table / equation, or repo: file
        quote: "The learning rate ... is set to 0.1"
      - when: {loss: smooth_svm}
        value: 1.0
        ...
    seed:
      swept: [0, 1, 2]                    # a swept key lists the sweep's values
      source: choice
      why: B18 does not say how many seeds it ran; three give a t-interval.

A ``when`` matches the job's swept values, its config group choices and its composed values. A
key that a swept method sets (``g22_method=smooth_svm_k3`` chooses ``loss`` and sets ``k``) is
listed with ``swept`` too: the values the jobs take, checked as a swept key's are.

``cited`` needs a ``quote`` (the paper's words; ``…`` stands for words left out) and ``ref``;
``code`` needs ``ref`` (repository and file); ``inferred`` and ``choice`` need ``why``.
:func:`problems` holds a card against the composed configs of every job: a test calls it for every
experiment, so a protocol never drifts from its card in silence.

Keys that never change what a run learns or reports (where it runs, how fast, how verbosely, how
often it saves: :data:`topk.report.fidelity.PROTOCOL_FREE_KEYS`) need no entry, nor do ``experiment``,
``protocol_card`` and Hydra's ``_partial_`` flags.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

CARDS = Path(__file__).resolve().parent
SOURCES = {
    "cited": "the paper's words",
    "code": "the published code",
    "inferred": "inferred from the paper",
    "choice": "our choice",
}
NEEDS = {"cited": ("ref", "quote"), "code": ("ref",), "inferred": ("why",), "choice": ("why",)}
SECTIONS = ("dataset", "model", "loss", "k", "n_samples", "augment", "optim", "schedule", "trainer")
NOT_PROTOCOL = {"experiment", "protocol_card", "dataset.download"}  # download: how data arrives, not what it is


@dataclass(frozen=True)
class Entry:
    """One value of a card and its source; ``when`` limits it to jobs with those swept values,
    ``swept`` replaces ``value`` for a key the sweep varies."""

    key: str
    source: str
    value: object = None
    swept: tuple | None = None
    when: tuple[tuple[str, tuple], ...] = ()
    ref: str = ""
    quote: str = ""
    why: str = ""

    def applies_to(self, job: Mapping) -> bool:
        """Whether this case is the one for ``job`` (its swept values, normalised)."""
        from topk.report.fidelity import normalise

        return all(normalise(job.get(key)) in values for key, values in self.when)

    @property
    def shown_value(self) -> str:
        from topk.report.fidelity import normalise, shown

        def text(value) -> str:
            return str(value).lower() if isinstance(value, bool) else shown(normalise(value))

        if self.swept is not None:
            return "swept: " + ", ".join(map(text, self.swept))
        return text(self.value)

    @property
    def shown_when(self) -> str:
        from topk.report.fidelity import shown

        return "; ".join(f"{key} = {' or '.join(shown(v) for v in values)}"
                         for key, values in self.when)


@dataclass(frozen=True)
class Card:
    """An experiment's protocol card, its fragments merged in."""

    experiment: str
    reproduces: str
    entries: tuple[Entry, ...]
    facts: tuple[Entry, ...] = field(default=())

    def cases(self, key: str) -> list[Entry]:
        return [entry for entry in self.entries if entry.key == key]


class CardError(ValueError):
    """A card file that cannot be read as a card."""


def card_path(experiment: str) -> Path:
    return CARDS / f"{experiment}.yaml"


def experiments_with_cards() -> list[str]:
    return sorted(path.stem for path in CARDS.glob("*.yaml"))


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CardError(f"cannot read the protocol card {path}: {error}") from None
    if not isinstance(data, dict):
        raise CardError(f"the protocol card {path} is not a mapping of fields")
    return data


def _when(path: Path, key: str, raw) -> tuple[tuple[str, tuple], ...]:
    from topk.report.fidelity import normalise

    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise CardError(f"{path}: {key}'s `when` must map swept keys to values, got {raw!r}")
    return tuple((str(k), tuple(normalise(v) for v in (vs if isinstance(vs, list) else [vs])))
                 for k, vs in raw.items())


def _entries(path: Path, key: str, raw) -> list[Entry]:
    """The cases of one key, each checked for a known source and the fields that source needs."""
    cases = raw if isinstance(raw, list) else [raw]
    entries = []
    for case in cases:
        if not isinstance(case, dict):
            raise CardError(f"{path}: the entry of {key} must be a mapping (value, source, ...)")
        unknown = set(case) - {"value", "swept", "when", "source", "ref", "quote", "why"}
        source = case.get("source")
        if unknown:
            raise CardError(f"{path}: {key} has unknown fields {sorted(unknown)}")
        if source not in SOURCES:
            raise CardError(f"{path}: {key}'s source must be one of {', '.join(SOURCES)}, "
                            f"got {source!r}")
        missing = [name for name in NEEDS[source] if not str(case.get(name) or "").strip()]
        if missing:
            raise CardError(f"{path}: {key} is {source} and needs {' and '.join(missing)}")
        swept = case.get("swept")
        entries.append(Entry(key, source, case.get("value"),
                             None if swept is None else tuple(swept),
                             _when(path, key, case.get("when")), str(case.get("ref") or ""),
                             " ".join(str(case.get("quote") or "").split()),
                             " ".join(str(case.get("why") or "").split())))
    return entries


def _merged_keys(path: Path, data: dict, part: str = "keys") -> dict:
    """The card's ``keys`` (or ``facts``) over those of its fragments, in order (a later one
    replaces a key)."""
    keys: dict = {}
    for fragment in data.get("uses") or []:
        fragment_path = CARDS / "common" / f"{fragment}.yaml"
        if not fragment_path.is_file():
            known = sorted(p.stem for p in (CARDS / "common").glob("*.yaml"))
            raise CardError(f"{path} uses the fragment {fragment!r}, which does not exist; "
                            f"fragments: {', '.join(known)}")
        keys.update(_read(fragment_path).get(part) or {})
    keys.update(data.get(part) or {})
    return keys


def _in_this_sweep(entries: list[Entry], own: set[str], swept: dict[str, set]) -> list[Entry]:
    """The entries with each fragment case narrowed to the values the card sweeps: a ``when`` on a
    swept key keeps only the sweep's values, and a case left with none is another experiment's
    and is left out. The card's own entries (keys in ``own``) stay as written."""
    kept = []
    for entry in entries:
        if entry.key in own:
            kept.append(entry)
            continue
        when = tuple((key, tuple(v for v in values if v in swept[key]) if key in swept else values)
                     for key, values in entry.when)
        if all(values for _, values in when):
            kept.append(replace(entry, when=when))
    return kept


@functools.cache
def load(experiment: str) -> Card:
    """The protocol card of ``experiment``, fragments merged (their cases for values the card
    does not sweep left out)."""
    from topk.report.fidelity import normalise

    path = card_path(experiment)
    if not path.is_file():
        raise CardError(f"experiment {experiment!r} has no protocol card ({path}); cards exist for "
                        f"{', '.join(experiments_with_cards())}")
    data = _read(path)
    if data.get("experiment") != experiment:
        raise CardError(f"{path} names experiment {data.get('experiment')!r}, not {experiment!r}")
    entries = [e for key, raw in _merged_keys(path, data).items() for e in _entries(path, key, raw)]
    entries.sort(key=lambda entry: section_rank(entry.key))
    facts = [e for key, raw in _merged_keys(path, data, "facts").items()
             for e in _entries(path, key, raw)]
    swept = {e.key: {normalise(v) for v in e.swept} for e in entries if e.swept is not None}
    entries = _in_this_sweep(entries, set(data.get("keys") or {}), swept)
    facts = _in_this_sweep(facts, set(data.get("facts") or {}), swept)
    return Card(experiment, str(data.get("reproduces") or ""), tuple(entries), tuple(facts))


def section_rank(key: str) -> int:
    """Where a key's rows stand on a card: data, model, loss, augmentation, optimiser, schedule,
    trainer, then the rest (seed, image_size)."""
    head = key.split(".")[0]
    within = 0 if key == head else 1 if key.endswith("._target_") else 2
    return (SECTIONS.index(head) if head in SECTIONS else len(SECTIONS)) * 3 + within


def result_keys(params: Mapping) -> list[str]:
    """The keys of a flat composed config that a card must account for."""
    from topk.report.fidelity import PROTOCOL_FREE_KEYS

    return [key for key in params
            if key not in PROTOCOL_FREE_KEYS and key not in NOT_PROTOCOL
            and not key.endswith("._partial_")]


def _job_text(job) -> str:
    from topk.report.fidelity import normalise, shown

    return " ".join(f"{key}={shown(normalise(value))}" for key, value in job) or "the one job"


def job_config(proto, job) -> tuple[dict, dict]:
    """A job's ``(values, params)``: what an entry's ``when`` is matched against (the job's swept
    values, the config group choices it composes: ``loss``, ``model``, ``dataset`` ... even
    where the sweep fixes them, and its composed values: ``k`` where a swept method sets it),
    and its flat composed config (as :meth:`topk.report.fidelity.Protocol.params`)."""
    from topk.report.fidelity import SEED, _override_text

    setting = tuple(f"{key}={_override_text(value)}" for key, value in job if key != SEED)
    choices, params = _setting_config(proto.id, setting)
    seed = {key: value for key, value in job if key == SEED}
    return {**params, **choices, **dict(job)}, {**params, **seed}


@functools.cache
def _setting_config(experiment: str, setting: tuple[str, ...]) -> tuple[dict, dict]:
    """The group choices and the flat config of one setting, from one composition."""
    from topk.report.fidelity import _compose
    from topk.run_dir import run_params

    cfg = _compose((f"+experiment={experiment}", *setting), hydra_node=True)
    choices = {key: value for key, value in cfg.hydra.runtime.choices.items() if not key.startswith("hydra")}
    return choices, run_params(cfg)


def problems(experiment: str) -> list[str]:
    """Every way the card of ``experiment`` and the configs its sweep composes disagree: a
    result-affecting key without an entry, a value the card does not state, a swept key whose
    values differ from the sweep's, and entries no job uses. Empty when the card is true."""
    from topk.report.fidelity import normalise, protocol, shown

    card, proto = load(experiment), protocol(experiment)
    jobs_with: dict[str, list[str]] = {}  # a problem (first example) -> the jobs that have it
    used: set[tuple[str, int]] = set()
    listed = {e.key for e in card.entries if e.swept is not None}  # swept, or set by a swept key
    taken: dict[str, set] = {key: set() for key in listed | set(proto.keys)}  # key -> the jobs' values
    for job in proto.jobs:
        values, params = job_config(proto, job)
        for key in taken:
            if key in proto.keys or any(e.key == key and e.swept is not None and e.applies_to(values)
                                        for e in card.entries):
                taken[key].add(normalise(values.get(key)))
        for key in result_keys(params):
            cases = [(i, e) for i, e in enumerate(card.entries) if e.key == key and e.applies_to(values)]
            used.update((key, i) for i, _ in cases)
            composed = shown(normalise(params[key]))
            if len(cases) != 1:
                problem = (f"{key}: {'no' if not cases else len(cases)} card entries apply "
                           f"(composed value {composed})")
            elif cases[0][1].swept is None and normalise(cases[0][1].value) != normalise(params[key]):
                problem = f"{key}: the card says {cases[0][1].shown_value}, the config composes {composed}"
            else:
                continue
            jobs_with.setdefault(problem, []).append(_job_text(job))
    found = [f"{problem} in {len(jobs)} job(s), e.g. {jobs[0]}" for problem, jobs in jobs_with.items()]
    for key, ran in taken.items():  # a `swept` list names the values the jobs take
        swept = [(i, e) for i, e in enumerate(card.entries) if e.key == key and e.swept is not None]
        used.update((key, i) for i, _ in swept)
        if not swept or {normalise(v) for _, e in swept for v in e.swept} != ran:
            how = "swept" if key in proto.keys else "set by the sweep"
            found.append(f"{key} is {how} over {', '.join(sorted(map(shown, ran)))}; the card's "
                         f"`swept` list must name exactly those values")
    found += [f"{e.key}: no job of the sweep uses this entry"
              + (f" (when {e.shown_when})" if e.when else "")
              for i, e in enumerate(card.entries) if (e.key, i) not in used]
    return found
