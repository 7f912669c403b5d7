//! The runner on PostgreSQL (issue 17), against a real server that each test starts
//! (support/pg.rs: initdb in a temp dir, postgres on a loopback port, fsync on).

mod support;
use support::pg::PgServer;

#[test]
fn the_fixture_starts_a_real_server_and_stops_it() {
    let mut s = PgServer::start("fixture");
    let url = s.create_db("fx");
    let mut c = s.client("fx");
    let v: String = c.query_one("SHOW server_version", &[]).unwrap().get(0);
    assert!(v.starts_with(char::is_numeric), "{v}");
    let fsync: String = c.query_one("SHOW fsync", &[]).unwrap().get(0);
    assert_eq!(fsync, "on");
    let listen: String = c.query_one("SHOW listen_addresses", &[]).unwrap().get(0);
    assert_eq!(listen, "127.0.0.1");
    drop(c);
    let pid = s.pid();
    s.stop();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the server process is gone");
    assert!(postgres::Client::connect(&url, postgres::NoTls).is_err(), "nothing listens any more");
}
