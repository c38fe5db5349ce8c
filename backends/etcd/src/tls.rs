//! TLS for the connection: the CA, and the client certificate and key when the server wants one.

use etcd_client::{Certificate, Identity as TlsIdentity, TlsOptions};
use leader_lock::input::Pem;
use leader_lock::LockError;

use crate::config::{self, EtcdConfig};

pub(crate) fn tls_options(config: &EtcdConfig) -> Result<TlsOptions, LockError> {
    // The TLS stack only says "transport error" about a bad file later; say which one now.
    let read = |setting: &str, path: &std::path::Path, kind: Pem| {
        config::read_tls_file(setting, path, kind).map_err(LockError::refused)
    };
    let mut tls = TlsOptions::new();
    match &config.ca_file {
        Some(ca) => {
            let ca = read("etcd-ca-file", ca, Pem::Certificates)?;
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        // A server certificate from a public CA: the system's trusted roots verify it.
        None => tls = tls.with_native_roots(),
    }
    match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => {
            let cert = read("etcd-cert-file", cert, Pem::Certificates)?;
            let key = read("etcd-key-file", key, Pem::PrivateKey)?;
            tls = tls.identity(TlsIdentity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => {
            return Err(LockError::refused(
                "etcd-cert-file and etcd-key-file must be given together",
            ))
        }
    }
    Ok(tls)
}
