//! TLS for the connection: the CA, and the client certificate and key when the server wants one.

use etcd_client::{Certificate, Identity as TlsIdentity, TlsOptions};
use leader_lock::backend::{ConfigError, LockError};
use leader_lock::input::Pem;

use crate::config::{self, EtcdConfig};

pub(crate) fn tls_options(config: &EtcdConfig) -> Result<TlsOptions, LockError> {
    // The TLS stack only says "transport error" about a bad file later; say which one now.
    let mut tls = TlsOptions::new();
    match &config.ca_file {
        Some(ca) => {
            let ca = config::read_tls_file("etcd-ca-file", ca, Pem::Certificates)?;
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        // A server certificate from a public CA: the system's trusted roots verify it.
        None => tls = tls.with_native_roots(),
    }
    match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => {
            let cert = config::read_tls_file("etcd-cert-file", cert, Pem::Certificates)?;
            let key = config::read_tls_file("etcd-key-file", key, Pem::PrivateKey)?;
            tls = tls.identity(TlsIdentity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => {
            return Err(ConfigError::invalid(
                "etcd-cert-file",
                "must be given together with etcd-key-file",
            )
            .into())
        }
    }
    Ok(tls)
}
