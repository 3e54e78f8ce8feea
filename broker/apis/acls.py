"""DescribeAcls, CreateAcls and DeleteAcls v0-3 (v2+ flexible), on the authorizer's ACLs.

Without an authorizer (``authorizer.class.name`` not set) they answer SECURITY_DISABLED, as
Kafka does. Describing needs DESCRIBE on the cluster, changing ALTER on the cluster.
"""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    ResourceType,
)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

DISABLED = "No Authorizer is configured on the broker"


def _filter(f, version: int) -> AclFilter:  # noqa: ANN001 - a request's filter struct
    prefix = "resource_type_filter"
    pattern = getattr(f, "pattern_type_filter", PatternType.LITERAL) if version >= 1 else 3
    return AclFilter(
        getattr(f, prefix),
        f.resource_name_filter,
        pattern,
        f.principal_filter,
        f.host_filter,
        f.operation,
        f.permission_type,
    )


@serves(ApiKey.DESCRIBE_ACLS, 0, 3)
def describe(ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse:
    auth = ctx.broker.authorizer
    if auth is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=DISABLED)
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    flt = _filter(req, ctx.api_version)
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in auth.bindings():
        if flt.matches(b):
            groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    Res = DescribeAclsResponse.DescribeAclsResource
    Desc = DescribeAclsResponse.AclDescription
    return DescribeAclsResponse(
        resources=[
            Res(
                resource_type=t,
                resource_name=n,
                pattern_type=p,
                acls=[
                    Desc(
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in bs
                ],
            )
            for (t, n, p), bs in sorted(groups.items())
        ]
    )


@serves(ApiKey.CREATE_ACLS, 0, 3)
async def create(ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse:
    Result = CreateAclsResponse.AclCreationResult
    auth = ctx.broker.authorizer
    if auth is None:
        return CreateAclsResponse(
            results=[
                Result(error_code=ErrorCode.SECURITY_DISABLED, error_message=DISABLED)
                for _ in req.creations
            ]
        )
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER):
        return CreateAclsResponse(
            results=[
                Result(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for _ in req.creations
            ]
        )
    results, valid = [], []
    for c in req.creations:
        b = AclBinding(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type if ctx.api_version >= 1 else PatternType.LITERAL,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        reason = b.invalid_reason()
        if reason is None:
            valid.append(b)
            results.append(Result())
        else:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST, error_message=reason))
    await auth.create(valid)
    return CreateAclsResponse(results=results)


@serves(ApiKey.DELETE_ACLS, 0, 3)
async def delete(ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse:
    Result = DeleteAclsResponse.DeleteAclsFilterResult
    Match = DeleteAclsResponse.DeleteAclsMatchingAcl
    auth = ctx.broker.authorizer
    if auth is None:
        return DeleteAclsResponse(
            filter_results=[
                Result(error_code=ErrorCode.SECURITY_DISABLED, error_message=DISABLED)
                for _ in req.filters
            ]
        )
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER):
        return DeleteAclsResponse(
            filter_results=[
                Result(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for _ in req.filters
            ]
        )
    results, doomed = [], []
    for f in req.filters:
        flt = _filter(f, ctx.api_version)
        hits = [b for b in auth.bindings() if flt.matches(b)]
        doomed += hits
        results.append(
            Result(
                matching_acls=[
                    Match(
                        resource_type=b.resource_type,
                        resource_name=b.resource_name,
                        pattern_type=b.pattern_type,
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in hits
                ]
            )
        )
    await auth.delete(list(dict.fromkeys(doomed)))
    return DeleteAclsResponse(filter_results=results)
