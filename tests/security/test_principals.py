"""The principal of a TLS client: its certificate's distinguished name, mapped by Kafka's
``ssl.principal.mapping.rules``."""

from __future__ import annotations

import pytest

from broker.security.tls import check_rules, distinguished_name, map_principal

DN = "CN=alice,OU=eng,O=kcoord tests"


def test_distinguished_name_in_rfc2253_order() -> None:
    cert = {
        "subject": (
            (("organizationName", "kcoord tests"),),
            (("organizationalUnitName", "eng"),),
            (("commonName", "alice, the first"),),
        )
    }
    assert distinguished_name(cert) == "CN=alice\\, the first,OU=eng,O=kcoord tests"


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("DEFAULT", DN),
        ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/", "alice@eng"),
        ("RULE:^CN=(.*?),.*$/$1/U", "ALICE"),
        ("RULE:^CN=bob,.*$/bob/,RULE:^CN=(.*?),.*$/$1/L,DEFAULT", "alice"),
        ("RULE:^CN=bob,.*$/bob/,DEFAULT", DN),
        ("RULE:^O=nobody$/x/", DN),  # nothing matches: the name as it is
    ],
)
def test_mapping_rules(rules: str, expected: str) -> None:
    assert map_principal(DN, check_rules(rules)) == expected


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$", "DEFAULT,nonsense"])
def test_malformed_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        check_rules(rules)
