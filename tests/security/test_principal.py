"""ssl.principal.mapping.rules (Kafka's SslPrincipalMapper) and the JAAS values the broker reads."""

from __future__ import annotations

import pytest

from strom.security import jaas
from strom.security.principal import NoMatchingRule, SslPrincipalMapper


@pytest.mark.parametrize(("rules", "dn", "name"), [
    ("DEFAULT", "CN=client,OU=eng,O=x", "CN=client,OU=eng,O=x"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,DEFAULT", "CN=Client,OU=Eng,O=x", "client@eng"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$1/U, DEFAULT", "CN=client,O=x", "CN=client,O=x"),  # no match: DEFAULT
    ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/", "OU=a,CN=kafka1.example,O=b", "kafka1.example"),
    ("RULE:^CN=([^,]*)\\/x$/$1/", "CN=a/x", "a"),  # an escaped slash in the pattern
])
def test_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert SslPrincipalMapper(rules).name_for(dn) == name


def test_no_rule_matches() -> None:
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=admin$/admin/").name_for("CN=client")


@pytest.mark.parametrize("rules", ["RULE:abc", "RULE:(/x/", "NOPE"])
def test_bad_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_jaas_plain_users_and_login() -> None:
    entry = jaas.parse('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                       '  username="admin" password="a\\"b" user_admin="a\\"b" user_alice=alice-secret;')
    assert entry.login_module == jaas.PLAIN_LOGIN_MODULE and entry.flag == "required"
    assert (entry.username, entry.password) == ("admin", 'a"b')
    assert entry.plain_users() == {"admin": 'a"b', "alice": "alice-secret"}


@pytest.mark.parametrize("text", ["", "Module", "Module required user=1", "Module sometimes;",
                                  "A required; B required;"])
def test_jaas_refused(text: str) -> None:
    with pytest.raises(jaas.JaasError):
        jaas.parse(text)
