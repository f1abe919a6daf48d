"""The signed review record: canonical form, Ed25519 signature, verification."""

from __future__ import annotations

import pytest

from foundation.hooks.review import fingerprint, parsed_entries, verified_approval
from graph import signing
from graph.model import RecordCheck
from graph.signing import Signer, SigningKeyError
from tests.conftest import TEST_SIGNER, signed_review

REF = "github:acme/widgets#7"
PATH = "specs/7/requirements.md"
TEXT = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


def a_record(**changes):
    data = signing.record(work_item=REF, gate="requirements-approval", visit=1,
                          outcome="approved", reviewer="alice", reviewer_id=42,
                          source="comment:1", approved={"artifact": PATH, "digest": "d"},
                          notes=signing.notes_digest(()), at="2026-11-30T12:00:00Z")
    data.update(changes)
    return data


KEYS = {TEST_SIGNER.key_id: TEST_SIGNER.public}


def test_a_signed_record_verifies_and_any_change_to_it_does_not():
    data = a_record()
    encoded, signature = signing.encode(data), TEST_SIGNER.sign(data)
    assert signing.verify(encoded, signature, KEYS).record == data
    for field, value in (("outcome", "changes-requested"), ("reviewer", "mallory"),
                         ("reviewer_id", 43), ("gate", "design-approval"), ("visit", 2)):
        forged = signing.encode(a_record(**{field: value}))
        assert signing.verify(forged, signature, KEYS).problem == "bad-signature", field


def test_verification_names_why_a_record_does_not_count():
    data = a_record()
    encoded, signature = signing.encode(data), TEST_SIGNER.sign(data)
    other = Signer.generate()
    assert signing.verify(None, None, KEYS).problem == "unsigned"
    assert signing.verify(encoded, other.sign(data), KEYS).problem == "unknown-key"
    assert signing.verify(encoded, "ed25519-0:short", KEYS).problem == "malformed"
    assert signing.verify("A" * 5000, signature, KEYS).problem == "malformed"
    assert signing.verify(encoded, signature, {}).problem == "unknown-key"


def test_the_canonical_form_has_exactly_the_record_fields():
    with pytest.raises(ValueError, match="exactly the fields"):
        signing.canonical({**a_record(), "extra": 1})
    assert set(a_record()) == signing.RECORD_FIELDS
    assert signing.canonical(a_record()) == signing.canonical(dict(reversed(a_record().items())))


def test_a_signer_never_shows_its_key_and_bad_keys_are_named_not_echoed():
    assert repr(TEST_SIGNER) == f"Signer({TEST_SIGNER.key_id})"
    with pytest.raises(SigningKeyError) as raised:
        Signer.from_pem(b"-----BEGIN PRIVATE KEY-----\nsecretvalue\n", "THE_LOOP_SIGNING_KEY")
    assert "THE_LOOP_SIGNING_KEY" in str(raised.value) and "secretvalue" not in str(raised.value)
    again = Signer.from_pem(TEST_SIGNER.private_pem(), "test")
    assert again.key_id == TEST_SIGNER.key_id


def test_published_keys_parse_several_blocks_and_refuse_other_text():
    other = Signer.generate()
    keys = signing.parse_public_keys(TEST_SIGNER.public_pem() + other.public_pem(), "f")
    assert set(keys) == {TEST_SIGNER.key_id, other.key_id}
    with pytest.raises(SigningKeyError, match="holds no public key"):
        signing.parse_public_keys("not a key", "f")


def check(authorized=lambda login, user_id: login == "alice"):
    return RecordCheck(REF, "requirements-approval", PATH, KEYS, authorized)


def test_an_entry_counts_only_while_the_artifact_is_what_was_approved():
    text = signed_review(TEXT, work_item=REF, path=PATH)
    assert fingerprint(text) == fingerprint(TEXT)  # adding the entry changes nothing
    assert verified_approval(text, check()).approved
    changed = text.replace("\ny\n", "\ny, more\n", 1)
    assert not verified_approval(changed, check()).approved


def test_an_entry_with_bullets_is_altered_when_a_bullet_is_added():
    text = signed_review(TEXT, work_item=REF, path=PATH, outcome="approved-with-comments",
                         bullets=["name the fail-closed behaviour"])
    assert verified_approval(text, check()).approved
    [entry] = parsed_entries(text)
    assert entry.bullets == ("name the fail-closed behaviour",)
    added = text.rstrip("\n") + "\n- and drop the security section\n"
    approval = verified_approval(added, check())
    assert not approval.approved and [m.code for m in approval.findings] == ["record-altered"]


def test_the_latest_verified_entry_decides_and_forged_ones_are_skipped():
    approved = signed_review(TEXT, work_item=REF, path=PATH)
    rejected = signed_review(approved, work_item=REF, path=PATH, outcome="changes-requested",
                             reviewed_text=TEXT)
    assert not verified_approval(rejected, check()).approved
    forged = rejected + "\n### 2026-12-01 — @alice — approved\n"
    approval = verified_approval(forged, check())
    assert not approval.approved
    assert [m.code for m in approval.findings] == ["record-unsigned"]


def test_parsing_an_adversarial_record_line_is_bounded():
    line = "<!-- the-loop record=" + "A" * 65_000 + " signature=" + "b" * 65_000 + " -->"
    text = TEXT + "\n## Review comments\n\n### 2026-11-30 — @alice — approved\n\n" + line
    [entry] = parsed_entries(text)
    assert entry.record is None  # longer than any record: not a record line
    assert [m.code for m in verified_approval(text, check()).findings] == ["record-unsigned"]
