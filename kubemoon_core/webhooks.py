"""Admission and conversion webhooks: reviews, handlers, the sans-IO webhook app, declarations,
configurations and serving certificates.
"""

from ._admission import (
    ADMISSION_API_VERSION,
    AdmissionHandler,
    AdmissionRequest,
    AdmissionResponse,
    Operation,
    UserInfo,
    decode_admission_review,
    encode_admission_review,
)
from ._conversion import (
    CONVERSION_API_VERSION,
    ConversionFunction,
    ConversionRequest,
    ConversionResponse,
    Converter,
    decode_conversion_review,
    encode_conversion_review,
)
from ._crd import ConversionWebhook, ServiceReference
from ._public import publish
from ._webhook import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_CONVERSION_BODY_SIZE,
    AsyncAdmissionHandler,
    PendingAdmission,
    WebhookApp,
    WebhookKind,
    WebhookReply,
    ca_bundle_patch,
)
from ._webhook_certificates import (
    CertificateAction,
    CertificateFacts,
    CertificatePlan,
    CertificatePlanner,
    CertificatePolicy,
    CertificateState,
)
from ._webhook_config import (
    WebhookConfigurations,
    WebhookDeclaration,
    WebhookDeclarations,
    WebhookEndpoint,
    webhook_drift,
)
from ._webhook_typed import typed_handler

__all__ = [
    "ADMISSION_API_VERSION",
    "AdmissionHandler",
    "AdmissionRequest",
    "AdmissionResponse",
    "AsyncAdmissionHandler",
    "ca_bundle_patch",
    "CertificateAction",
    "CertificateFacts",
    "CertificatePlan",
    "CertificatePlanner",
    "CertificatePolicy",
    "CertificateState",
    "CONVERSION_API_VERSION",
    "ConversionFunction",
    "ConversionRequest",
    "ConversionResponse",
    "ConversionWebhook",
    "Converter",
    "decode_admission_review",
    "decode_conversion_review",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_CONVERSION_BODY_SIZE",
    "encode_admission_review",
    "encode_conversion_review",
    "Operation",
    "PendingAdmission",
    "ServiceReference",
    "typed_handler",
    "UserInfo",
    "webhook_drift",
    "WebhookApp",
    "WebhookConfigurations",
    "WebhookDeclaration",
    "WebhookDeclarations",
    "WebhookEndpoint",
    "WebhookKind",
    "WebhookReply",
]

publish(__name__, globals(), __all__)
