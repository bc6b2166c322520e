"""The ``bedrock-agentcore`` SDK's app and request context, imported once for the whole package.

bedrock-agentcore 1.25 declares ``RequestContext`` with a pydantic v1 ``class Config``; the warning is theirs to
fix and would fail every test run that treats warnings as errors.
"""

import warnings

from pydantic.warnings import PydanticDeprecatedSince20

with warnings.catch_warnings():
    warnings.simplefilter("ignore", PydanticDeprecatedSince20)
    from bedrock_agentcore.runtime import BedrockAgentCoreApp
    from bedrock_agentcore.runtime.context import BedrockAgentCoreContext, RequestContext

__all__ = ["BedrockAgentCoreApp", "BedrockAgentCoreContext", "RequestContext"]
