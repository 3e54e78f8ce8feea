"""DescribeUserScramCredentials and AlterUserScramCredentials v0: the SCRAM users in
kcoord's credential log (broker/security/credentials.py), with Kafka's checks and codes."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.security.credentials import Change
from broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

DResp = DescribeUserScramCredentialsResponse
AResp = AlterUserScramCredentialsResponse


@serves(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
def describe(
    ctx: RequestContext, req: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
        return DResp(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    store = ctx.broker.credentials
    users = store.users() if store is not None else {}
    results = []
    if req.users is None or not req.users:
        names = sorted(users)
    else:
        names = [u.name for u in req.users]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            return DResp(
                results=[
                    DResp.DescribeUserScramCredentialsResult(
                        user=n,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message=f"Cannot describe SCRAM credentials for the same user twice"
                        f" in a single request: {n}",
                    )
                    for n in sorted(dupes)
                ]
            )
    for name in names:
        creds = users.get(name)
        if creds is None:
            results.append(
                DResp.DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not exist: "
                    f"{name}",
                )
            )
            continue
        infos = [
            DResp.CredentialInfo(mechanism=MECHANISM_IDS[m], iterations=c.iterations)
            for m, c in sorted(creds.items())
        ]
        results.append(DResp.DescribeUserScramCredentialsResult(user=name, credential_infos=infos))
    return DResp(results=results)


@serves(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter(
    ctx: RequestContext, req: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    store = ctx.broker.credentials
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER):
        names = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return AResp(
            results=[
                AResp.AlterUserScramCredentialsResult(user=n, error_code=refused) for n in names
            ]
        )
    errors: dict[str, tuple[int, str]] = {}
    seen: dict[tuple[str, int], int] = {}
    for d in req.deletions:
        seen[(d.name, d.mechanism)] = seen.get((d.name, d.mechanism), 0) + 1
    for u in req.upsertions:
        seen[(u.name, u.mechanism)] = seen.get((u.name, u.mechanism), 0) + 1
    users = {d.name for d in req.deletions} | {u.name for u in req.upsertions}
    for (name, _), count in seen.items():
        if count > 1:
            errors[name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    changes: list[Change] = []
    for d in req.deletions:
        if d.name in errors:
            continue
        mechanism = MECHANISM_NAMES.get(d.mechanism)
        if not d.name:
            errors[d.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif store is None or store.get(d.name, mechanism) is None:
            errors[d.name] = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            changes.append((d.name, mechanism, None))
    for u in req.upsertions:
        if u.name in errors:
            continue
        mechanism = MECHANISM_NAMES.get(u.mechanism)
        if not u.name:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            errors[u.name] = (
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
            )
        elif not u.salt or not u.salted_password:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and password are required")
        else:
            cred = ScramCredential.from_salted_password(
                mechanism, u.salt, u.salted_password, u.iterations
            )
            changes.append((u.name, mechanism, cred))
    # A user with any error gets none of its changes, as Kafka applies them per user.
    changes = [c for c in changes if c[0] not in errors]
    if store is not None:
        await store.apply(changes)
    return AResp(
        results=[
            AResp.AlterUserScramCredentialsResult(
                user=name,
                error_code=errors.get(name, (0, None))[0],
                error_message=errors.get(name, (0, None))[1],
            )
            for name in sorted(users)
        ]
    )
