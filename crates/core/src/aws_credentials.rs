//! S3 credentials by the AWS SDK's own resolution (`aws-config`'s default chain), for the
//! sources object_store does not read itself: named profiles (`AWS_PROFILE`, `~/.aws/config`
//! and `~/.aws/credentials`), IAM Identity Center (SSO) sessions, `credential_process`,
//! `role_arn` with a `source_profile` (assume-role), as well as the environment, web identity
//! tokens, ECS and instance metadata.
//!
//! The chain is built on first use (it is async) and its credentials are cached until five
//! minutes before they expire.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use object_store::aws::AwsCredential;
use tokio::sync::{Mutex, OnceCell};

/// Refresh credentials this long before they expire.
const EARLY: Duration = Duration::from_secs(300);

/// object_store's credential seam over `aws-config`'s default chain.
#[derive(Default)]
pub struct AwsChain {
    provider: OnceCell<aws_credential_types::provider::SharedCredentialsProvider>,
    cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl std::fmt::Debug for AwsChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AwsChain")
    }
}

fn failed(reason: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: format!(
            "no AWS credentials: {reason} (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run `aws sso login`)"
        )
        .into(),
    }
}

/// An error and its sources, `: `-joined (the SDK's top-level messages say little alone).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

impl AwsChain {
    async fn provider(
        &self,
    ) -> Result<&aws_credential_types::provider::SharedCredentialsProvider, object_store::Error>
    {
        self.provider
            .get_or_try_init(|| async {
                // The SDK's HTTP client (for SSO, STS and instance metadata) on rustls with
                // ring, as the rest of trawl: no second crypto library.
                let http = aws_smithy_http_client::Builder::new()
                    .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                        aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                    ))
                    .build_https();
                let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .http_client(http)
                    .load()
                    .await;
                sdk.credentials_provider()
                    .ok_or_else(|| failed("the AWS SDK found no credential source"))
            })
            .await
    }
}

#[async_trait::async_trait]
impl object_store::CredentialProvider for AwsChain {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some((c, expiry)) = cached.as_ref()
            && expiry.is_none_or(|e| SystemTime::now() + EARLY < e)
        {
            return Ok(c.clone());
        }
        let creds = self
            .provider()
            .await?
            .provide_credentials()
            .await
            .map_err(|e| failed(&chain(&e)))?;
        let c = Arc::new(AwsCredential {
            key_id: creds.access_key_id().to_owned(),
            secret_key: creds.secret_access_key().to_owned(),
            token: creds.session_token().map(str::to_owned),
        });
        *cached = Some((c.clone(), creds.expiry()));
        Ok(c)
    }
}
