"""`kcoord users add|delete|list`: SCRAM users through Alter/DescribeUserScramCredentials, as
Kafka's `kafka-configs --entity-type users` does. The password is salted here, on the client
side, and only the salted form travels (the protocol's design)."""

from __future__ import annotations

import argparse
import getpass
import json
import secrets
import sys
from typing import Any

from broker.security.scram import MECHANISM_IDS, MECHANISM_NAMES, MIN_ITERATIONS, salted_password
from kcoord_admin.admin_client import AdminError, client_of, error_name
from protocol.api_keys import ApiKey
from protocol.messages import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)

MECHANISMS = tuple(MECHANISM_IDS)


def add_parser(commands: Any, common: Any) -> None:
    users = commands.add_parser("users", help="add, delete or list SCRAM users")
    sub = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    p = common(sub.add_parser("add", help="create a user or change its password"))
    p.add_argument("user", metavar="USER")
    p.add_argument(
        "--mechanism",
        action="append",
        choices=MECHANISMS,
        help="repeatable; default: both SCRAM-SHA-256 and SCRAM-SHA-512",
    )
    p.add_argument("--iterations", type=int, default=8192, help="4096..16384 (default 8192)")
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from stdin (default: prompt for it)",
    )
    p.set_defaults(admin=_add)
    p = common(sub.add_parser("delete", help="delete a user's credentials"))
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, help="default: both")
    p.set_defaults(admin=_delete)
    p = common(sub.add_parser("list", help="users and their mechanisms"))
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_list)


def _alter(args: argparse.Namespace, request: AlterUserScramCredentialsRequest) -> int:
    with client_of(args) as a:
        r = a.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    failed = [x for x in r.results if x.error_code]
    for x in failed:
        print(f"kcoord: error: {x.user}: {error_name(x.error_code)}: {x.error_message}",
              file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


def _add(args: argparse.Namespace) -> int:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.user}: ")
    if not password:
        raise ValueError("empty password")
    if args.iterations < MIN_ITERATIONS:
        raise ValueError(f"--iterations must be at least {MIN_ITERATIONS}")
    Req = AlterUserScramCredentialsRequest
    ups = []
    for m in args.mechanism or MECHANISMS:
        salt = secrets.token_bytes(32)
        ups.append(
            Req.ScramCredentialUpsertion(
                name=args.user,
                mechanism=MECHANISM_IDS[m],
                iterations=args.iterations,
                salt=salt,
                salted_password=salted_password(m, password, salt, args.iterations),
            )
        )
    code = _alter(args, Req(deletions=[], upsertions=ups))
    if code == 0:
        print(f"user {args.user}: {', '.join(args.mechanism or MECHANISMS)}")
    return code


def _delete(args: argparse.Namespace) -> int:
    Req = AlterUserScramCredentialsRequest
    dels = [
        Req.ScramCredentialDeletion(name=args.user, mechanism=MECHANISM_IDS[m])
        for m in args.mechanism or MECHANISMS
    ]
    return _alter(args, Req(deletions=dels, upsertions=[]))


def _list(args: argparse.Namespace) -> int:
    with client_of(args) as a:
        r = a.request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest()
        )
    if r.error_code:
        raise AdminError(f"{error_name(r.error_code)}: {r.error_message}", r.error_code)
    users = {
        x.user: {MECHANISM_NAMES[c.mechanism]: c.iterations for c in x.credential_infos}
        for x in r.results
    }
    if args.json:
        print(json.dumps(users, indent=2, sort_keys=True))
    else:
        for user, mechs in sorted(users.items()):
            print(user, " ".join(f"{m}({i})" for m, i in sorted(mechs.items())))
    return 0
