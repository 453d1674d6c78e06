"""The hidden tests' seeds: one per student and task, derived from the course's secret salt, so grades reproduce.

    seed = the first 31 bits of HMAC-SHA256(salt, "kit-hidden-seed-v1" NUL <grading id> NUL <task id>)

The seed draws a task's hidden shapes (the registry's ``[task.hidden] draw``) and seeds its random inputs. So the
same files graded again (a regrade, a resumed batch, another machine with the same GPU model) get the same hidden
inputs and the same points, two students get different ones, and a student who knows their id and the task but
not the salt cannot tell what theirs will be. An instructor's ``--seed`` overrides the derivation: every task
then takes that seed (to replay a grading, or to try one input on purpose).

**The salt** is the instructor's alone: ``KIT_GRADING_SALT`` when it is set (to keep the course's salt out of the
repository: the grading host's environment, the cluster job's), else the registry's ``[hidden_seed] salt``, a table
the student edition leaves out and `make release` refuses to ship (grader/release/release.py). It is never the
registry's ``[theory] salt``: that one ships to students, who draw their own theory questions with it (the loader
refuses a hidden-seed salt equal to it). A salt of fewer than ``MIN_SALT_CHARS`` characters, or none at all, is an
error that names both places; there is no silent fallback, because a grade drawn from a guessable seed is one a
student can prepare for. What the grader records (grading.json) is how each seed was made and the salt's fingerprint,
never the salt.

**The grading id** is who the submission belongs to, in this order: the id the caller knows (``make grade
STUDENT_ID=...`` / ``--student-id``; the class roster's SID, else email, else the submission's folder name in
``make grade-all``; Gradescope's submitter SID, else email), then the ``student_id`` of the submission's theory
answers, then the submission's own name (``alice/`` or ``alice.zip``). It is trimmed and lower-cased, so ``S123``
and ``s123`` draw the same inputs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from assignment.registry import MIN_SALT_CHARS, Registry

SALT_ENV = "KIT_GRADING_SALT"
DERIVATION = "kit-hidden-seed-v1"  # in every derived seed's message: a new derivation, new seeds
SEED_BITS = 31  # seeds stay below 2**31, as torch.Generator and random.Random take any of them
UNNAMED = "unnamed"


class SaltError(RuntimeError):
    """No usable salt: grading without ``--seed`` cannot derive the hidden seeds (the message says where to set one)."""


@dataclass(frozen=True)
class Salt:
    value: str
    source: str  # where it came from, for grading.json: the environment variable or the registry table

    @property
    def fingerprint(self) -> str:
        """A short hash that tells two salts apart (two hosts that disagree on seeds) and reveals nothing of it."""
        return hashlib.sha256(f"{DERIVATION}-fingerprint\0{self.value}".encode()).hexdigest()[:12]


def resolve_salt(registry: Registry) -> Salt:
    """``KIT_GRADING_SALT``, else the registry's ``[hidden_seed] salt``; SaltError when neither is usable."""
    from_env = os.environ.get(SALT_ENV)
    if from_env is not None:
        if len(from_env.strip()) < MIN_SALT_CHARS:
            raise SaltError(
                f"{SALT_ENV} is set but shorter than {MIN_SALT_CHARS} characters: a salt that short can "
                "be guessed, and with it every student's hidden inputs"
            )
        if registry.theory is not None and from_env.strip() == registry.theory.salt.strip():
            raise SaltError(f"{SALT_ENV} is the registry's theory salt, which ships to students: choose another")
        return Salt(from_env.strip(), SALT_ENV)
    if registry.hidden_seed_salt:
        return Salt(registry.hidden_seed_salt.strip(), f"{registry.path.name} [hidden_seed]")
    raise SaltError(
        f"no salt for the hidden tests' seeds: set {SALT_ENV} (at least {MIN_SALT_CHARS} characters), or "
        f"[hidden_seed] salt in {registry.path}, or pass --seed to give every task one seed"
    )


def normalise(grading_id: str | None) -> str:
    """The id as seeds are drawn from it: trimmed and lower-case (an empty one stands for an unnamed submission)."""
    return (grading_id or "").strip().lower() or UNNAMED


def derive(salt: Salt, grading_id: str, task_id: str) -> int:
    message = f"{DERIVATION}\0{normalise(grading_id)}\0{task_id}".encode()
    digest = hmac.new(salt.value.encode(), message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


@dataclass(frozen=True)
class SeedPlan:
    """The seed of each task of one grading, and how they were made (grading.json's ``seeds`` and ``seeding``)."""

    seeds: dict[str, int]
    record: dict

    def seed(self, task_id: str) -> int:
        return self.seeds[task_id]


def plan(task_ids: list[str], registry: Registry, *, fixed: int | None, grading_id: str, id_from: str) -> SeedPlan:
    """Every task's seed: ``fixed`` for all of them when the instructor gave one, else derived from the salt."""
    if fixed is not None:
        return SeedPlan({t: fixed for t in task_ids}, {"how": "--seed (the instructor's, for every task)"})
    salt = resolve_salt(registry)
    return SeedPlan(
        {t: derive(salt, grading_id, t) for t in task_ids},
        {
            "how": f"derived: HMAC-SHA256 of the salt, the grading id and the task ({DERIVATION})",
            "grading_id": normalise(grading_id),
            "grading_id_from": id_from,
            "salt_from": salt.source,
            "salt_fingerprint": salt.fingerprint,
        },
    )


def settings_key(registry: Registry, fixed: int | None) -> str:
    """What of the seeding shapes a batch's grades (part of its done-markers' key): the fixed seed, or the salt's
    fingerprint, so that a new salt grades every submission again. SaltError without either."""
    return f"seed {fixed}" if fixed is not None else f"salt {resolve_salt(registry).fingerprint}"
