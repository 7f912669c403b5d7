//! PostgreSQL over TLS (rustls) and the database role's privileges, against a real server this
//! test starts with `ssl = on`, a test CA and a server certificate that CA signed, and TCP
//! connections without TLS rejected by pg_hba.conf.

mod support;

use support::Dir;
use support::pg::PgServer;

const SPEC: &str =
    "id = \"tls-1\"\n\n[[step]]\nmodel = \"pay\"\ntool = \"payment\"\nargs = { amount = 3, to = \"a\" }\n";

/// The server log's lines for new sessions on database `db`.
fn sessions(s: &PgServer, db: &str) -> Vec<String> {
    s.log()
        .lines()
        .filter(|l| l.contains("connection authorized") && l.contains(&format!("database={db}")))
        .map(str::to_string)
        .collect()
}

/// `sslmode=verify-full` with the CA file runs a task over TLS (the server's log shows every
/// session of the runner encrypted); without TLS the server refuses; the certificate's name, its
/// CA and the URL's parameters are checked as libpq's modes say.
#[test]
fn tls_modes_against_a_server_with_a_ca_signed_certificate() {
    let s = PgServer::start("tls");
    let ca = s.require_tls("DNS:localhost");
    s.socket_client("postgres").batch_execute("CREATE DATABASE app").unwrap();
    let port = s.port();
    let ca_s = ca.display().to_string();
    let url = |host: &str, q: &str| format!("postgres://postgres@{host}:{port}/app{q}");
    let d = Dir::new("pg-tls");
    d.write("spec.toml", SPEC);

    let full = url("localhost", &format!("?sslmode=verify-full&sslrootcert={ca_s}"));
    d.run(&["run", "spec.toml", "--db", &full]).expect(0);
    let lines = sessions(&s, "app");
    assert!(!lines.is_empty(), "no session logged:\n{}", s.log());
    assert!(lines.iter().all(|l| l.contains("SSL enabled")), "a session without TLS:\n{}", lines.join("\n"));
    assert_eq!(d.applied("payments.sqlite", "tls-1", 0), 1);

    // no TLS (sslmode=prefer, the default, connects in plain text): refused by the server
    let out = d.run(&["list", "--db", &url("127.0.0.1", "")]);
    assert_ne!(out.code(), 0);
    assert!(out.stderr().contains("no encryption"), "{}", out.stderr());
    // the certificate names localhost, not 127.0.0.1: verify-full refuses, verify-ca accepts
    let out = d.run(&["list", "--db", &url("127.0.0.1", &format!("?sslmode=verify-full&sslrootcert={ca_s}"))]);
    assert_ne!(out.code(), 0);
    assert!(out.stderr().contains("certificate not valid for name \"127.0.0.1\""), "{}", out.stderr());
    d.run(&["list", "--db", &url("127.0.0.1", &format!("?sslmode=verify-ca&sslrootcert={ca_s}"))]).expect(0);
    // a CA that did not sign it: refused
    let other = ca.with_file_name("server.crt").display().to_string();
    let out = d.run(&["list", "--db", &url("localhost", &format!("?sslmode=verify-full&sslrootcert={other}"))]);
    assert_ne!(out.code(), 0);
    assert!(out.stderr().contains("certificate"), "{}", out.stderr());
    // require: encrypted, not verified
    d.run(&["list", "--db", &url("127.0.0.1", "?sslmode=require")]).expect(0);
    // bad parameters: exit 2, naming them
    let out = d.run(&["list", "--db", &url("localhost", "?sslmode=verify-full")]);
    out.expect(2);
    assert!(out.stderr().contains("sslrootcert"), "{}", out.stderr());
    let out = d.run(&["list", "--db", &url("localhost", "?sslmode=sometimes")]);
    out.expect(2);
    assert!(out.stderr().contains("sslmode=sometimes"), "{}", out.stderr());
    let out = d.run(&["list", "--db", &url("localhost", "?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")]);
    out.expect(2);
    assert!(out.stderr().contains("/nonexistent/ca.pem"), "{}", out.stderr());

    // the role's privileges (PostgreSQL 15: no CREATE on public for every role)
    let mut admin = s.socket_client("postgres");
    admin.batch_execute("CREATE ROLE app LOGIN").unwrap();
    admin.batch_execute("CREATE DATABASE appdb").unwrap();
    let app = format!("postgres://app@localhost:{port}/appdb?sslmode=verify-full&sslrootcert={ca_s}");
    let out = d.run(&["run", "spec.toml", "--db", &app]);
    out.expect(2);
    assert!(out.stderr().contains("may not create tables in schema public"), "{}", out.stderr());
    assert!(out.stderr().contains("GRANT CREATE ON SCHEMA public TO app"), "{}", out.stderr());
    // a log the admin created: the role may not read it, then not write it
    let owner = format!("postgres://postgres@localhost:{port}/appdb?sslmode=verify-full&sslrootcert={ca_s}");
    d.run(&["init", "--db", &owner]).expect(0);
    let out = d.run(&["list", "--db", &app]);
    out.expect(2);
    assert!(out.stderr().contains("role app lacks SELECT on public."), "{}", out.stderr());
    let mut appdb = s.socket_client("appdb");
    appdb.batch_execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO app").unwrap();
    d.run(&["list", "--db", &app]).expect(0);
    let out = d.run(&["run", "spec.toml", "--db", &app]);
    out.expect(2);
    assert!(out.stderr().contains("lacks SELECT,INSERT,UPDATE,DELETE"), "{}", out.stderr());
    appdb.batch_execute("GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO app").unwrap();
    std::fs::remove_dir_all(d.path("world")).unwrap();
    d.run(&["run", "spec.toml", "--db", &app]).expect(0);
    assert_eq!(d.applied("payments.sqlite", "tls-1", 0), 1);
}
