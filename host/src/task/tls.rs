//! PostgreSQL over TLS: libpq's `sslmode` and `sslrootcert` URL parameters for the synchronous
//! `postgres` client, with rustls (ring provider; no C TLS library) through
//! `tokio-postgres-rustls`.
//!
//! tokio-postgres itself knows only `sslmode=disable|prefer|require` and no `sslrootcert`
//! (tokio-postgres 0.7 `config.rs`), so [`split`] takes both out of the URL and
//! [`connector`] builds the verifier libpq's modes ask for (PostgreSQL docs, "SSL Support",
//! table "SSL Mode Descriptions"):
//!
//! | `sslmode`            | TLS  | the server's certificate                               |
//! |----------------------|------|--------------------------------------------------------|
//! | `disable`            | no   | -                                                      |
//! | `prefer` (default)   | no   | - (as before; libpq would try TLS first: say `require`) |
//! | `require`            | yes  | not checked, unless `sslrootcert` is given: then as `verify-ca` (libpq does the same) |
//! | `verify-ca`          | yes  | signed by a CA in `sslrootcert`                         |
//! | `verify-full`        | yes  | signed by a CA in `sslrootcert` **and** issued for the URL's host (a DNS name or IP address in its subjectAltName) |
//!
//! `verify-ca` and `verify-full` need `sslrootcert=FILE` (PEM, one or more CA certificates); libpq
//! falls back to `~/.postgresql/root.crt`, this runner asks for the file by name instead. The
//! server certificate must be an end-entity certificate signed by that CA: rustls (webpki)
//! refuses a self-signed CA certificate used as the server's own (`CaUsedAsEndEntity`), which the
//! PostgreSQL docs' one-step `openssl req -x509` recipe makes; make a CA and a leaf
//! (docs/RUNNER.md, "PostgreSQL over TLS").

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};

/// libpq's `sslmode`, as this runner applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// No TLS (the default, as before TLS support).
    #[default]
    Prefer,
    /// TLS, the certificate not checked (unless a CA file is given).
    Require,
    /// TLS, the certificate signed by the CA file's CA.
    VerifyCa,
    /// TLS, signed by the CA and issued for the host.
    VerifyFull,
}

/// The TLS parameters taken out of a URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsParams {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`.
    pub root_cert: Option<PathBuf>,
}

/// Takes `sslmode` and `sslrootcert` out of a `postgres://` URL's query: returns the URL
/// tokio-postgres accepts (`sslmode=require` for the verifying modes, so the client insists on
/// TLS) and the parameters. A URL without a query, or in `key=value` form, is returned as it is.
/// An unknown `sslmode`, or `verify-ca`/`verify-full` without `sslrootcert`, is an error.
pub fn split(url: &str) -> Result<(String, TlsParams), String> {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let Some((base, query)) = url.split_once('?').filter(|_| is_url) else {
        return Ok((url.to_string(), TlsParams::default()));
    };
    let mut p = TlsParams::default();
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "sslmode" => {
                p.mode = match v {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(format!(
                            "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                        ));
                    }
                }
            }
            "sslrootcert" => {
                let path = percent_decode(v);
                if path.is_empty() {
                    return Err("sslrootcert: empty (the CA certificate file, PEM)".into());
                }
                p.root_cert = Some(PathBuf::from(path));
            }
            _ => kept.push(pair),
        }
    }
    if matches!(p.mode, SslMode::VerifyCa | SslMode::VerifyFull) && p.root_cert.is_none() {
        return Err(format!(
            "sslmode={}: needs sslrootcert=FILE (the CA certificate that signed the server's, PEM)",
            if p.mode == SslMode::VerifyCa { "verify-ca" } else { "verify-full" }
        ));
    }
    let client_mode = match p.mode {
        SslMode::Disable => "disable",
        SslMode::Prefer => "prefer",
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
    };
    kept.push(match client_mode {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    Ok((format!("{base}?{}", kept.join("&")), p))
}

/// `%XX` decoded (a path in a URL's query may be percent-encoded).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The rustls provider (ring).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A connector for `p`, or `None` when the mode uses no TLS.
pub fn connector(p: &TlsParams) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>, String> {
    let verifier: Arc<dyn ServerCertVerifier> = match (p.mode, &p.root_cert) {
        (SslMode::Disable | SslMode::Prefer, _) => return Ok(None),
        (SslMode::Require, None) => Arc::new(AnyCert(provider().signature_verification_algorithms)),
        (SslMode::VerifyFull, Some(ca)) => webpki(ca)?,
        (SslMode::Require | SslMode::VerifyCa, Some(ca)) => Arc::new(AnyName(webpki(ca)?)),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => return Err("no sslrootcert".into()),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(tokio_postgres_rustls::MakeRustlsConnect::new(config)))
}

/// The standard verifier (chain to the CA file's roots, name checked) for CA file `ca`.
fn webpki(ca: &std::path::Path) -> Result<Arc<WebPkiServerVerifier>, String> {
    let what = |e: &dyn std::fmt::Display| format!("sslrootcert {}: {e}", ca.display());
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca).map_err(|e| what(&e))?;
    for c in certs {
        roots.add(c.map_err(|e| what(&e))?).map_err(|e| what(&e))?;
    }
    if roots.is_empty() {
        return Err(what(&"no certificate in the file (expected PEM: -----BEGIN CERTIFICATE-----)"));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build().map_err(|e| what(&e))
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require` without a CA file: any certificate (encryption only, as libpq's `require`); the
/// handshake's signatures are still checked against the certificate presented.
#[derive(Debug)]
struct AnyCert(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(m, c, d, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(m, c, d, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split() {
        let (u, p) =
            split("postgres://a@h:5/d?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=2").unwrap();
        assert_eq!(u, "postgres://a@h:5/d?connect_timeout=2&sslmode=require");
        assert_eq!(p, TlsParams { mode: SslMode::VerifyFull, root_cert: Some("/tmp/ca.pem".into()) });
        let (u, p) = split("postgres://a@h:5/d").unwrap();
        assert_eq!((u.as_str(), p), ("postgres://a@h:5/d", TlsParams::default()));
        assert_eq!(split("postgres://a@h/d?sslmode=disable").unwrap().0, "postgres://a@h/d?sslmode=disable");
        assert!(split("postgres://a@h/d?sslmode=verify-full").unwrap_err().contains("sslrootcert"));
        assert!(split("postgres://a@h/d?sslmode=allow2").unwrap_err().contains("expected disable"));
        assert!(connector(&TlsParams::default()).unwrap().is_none());
        assert!(connector(&TlsParams { mode: SslMode::Require, root_cert: None }).unwrap().is_some());
        let missing = TlsParams { mode: SslMode::VerifyFull, root_cert: Some("/nonexistent/ca.pem".into()) };
        match connector(&missing) {
            Err(e) => assert!(e.contains("/nonexistent/ca.pem"), "{e}"),
            Ok(_) => panic!("a missing CA file was accepted"),
        }
    }
}
