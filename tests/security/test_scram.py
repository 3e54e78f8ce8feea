"""The SCRAM server against RFC 7677's SCRAM-SHA-256 example and its failure cases."""

from __future__ import annotations

import base64

import pytest

from broker.security.scram import ScramCredential, ScramError, ScramServer, salted_password

# RFC 7677, section 3.
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def credential() -> ScramCredential:
    salted = salted_password("SCRAM-SHA-256", "pencil", SALT, 4096)
    return ScramCredential.from_salted_password("SCRAM-SHA-256", SALT, salted, 4096)


def server(cred: ScramCredential | None) -> ScramServer:
    return ScramServer("SCRAM-SHA-256", lambda user: cred if user == "user" else None, SERVER_NONCE)


def test_rfc7677_exchange() -> None:
    s = server(credential())
    assert s.first(CLIENT_FIRST) == SERVER_FIRST
    assert s.final(CLIENT_FINAL) == SERVER_FINAL
    assert (s.done, s.user) == (True, "user")


def test_a_wrong_proof_and_an_unknown_user_fail_alike() -> None:
    s = server(credential())
    s.first(CLIENT_FIRST)
    bad = CLIENT_FINAL[:-6] + b"AAAAA="
    with pytest.raises(ScramError):
        s.final(bad)
    unknown = server(None)
    first = unknown.first(CLIENT_FIRST)
    assert first.startswith(b"r=rOprNGfwEbeRWgbNEkqO") and b",i=4096" in first
    assert unknown.first(CLIENT_FIRST) == first  # the same decoy salt each time
    with pytest.raises(ScramError):
        unknown.final(CLIENT_FINAL)


def test_a_replayed_nonce_or_channel_binding_is_refused() -> None:
    s = server(credential())
    s.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        s.final(CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr"))
    with pytest.raises(ScramError, match="channel binding"):
        server(credential()).first(b"p=tls-unique,,n=user,r=abc")


def test_plain_checks_a_password_against_the_scram_credential() -> None:
    cred = credential()
    assert cred.check_password("SCRAM-SHA-256", "pencil")
    assert not cred.check_password("SCRAM-SHA-256", "pencil2")
