//! Proves that the bundled libzmq is built with the Linux platform features tickbox relies on. The `zmq` crate's
//! build omits libzmq's Linux defines; `.cargo/config.toml` restores them, and each test here fails if one is lost
//! (most fail silently otherwise: options accepted and then ignored).

#![cfg(target_os = "linux")]

use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

fn fd_targets() -> Vec<(c_int, String)> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let fd: c_int = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some((fd, target.to_string_lossy().into_owned()))
        })
        .collect()
}

fn thread_comms() -> Vec<(String, String)> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            Some((comm.trim().to_owned(), status))
        })
        .collect()
}

fn pair(ctx: &zmq::Context) -> (zmq::Socket, zmq::Socket, String) {
    let server = ctx.socket(zmq::PULL).unwrap();
    server.set_linger(0).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&server);
    let client = ctx.socket(zmq::PUSH).unwrap();
    client.set_linger(0).unwrap();
    (server, client, endpoint)
}

#[test]
fn interface_names_bind_and_source_interface_connects_deliver() {
    // ZMQ_HAVE_IFADDRS + HAVE_IF_NAMETOINDEX + ZMQ_HAVE_LINUX: without them `tcp://lo:*` fails with ENODEV and a
    // source-interface connect returns success but never connects.
    let ctx = zmq::Context::new();
    let server = ctx.socket(zmq::PULL).unwrap();
    server.set_linger(0).unwrap();
    server.bind("tcp://lo:*").expect("bind by interface name");
    let endpoint = server.get_last_endpoint().unwrap().unwrap();
    let port = endpoint.rsplit(':').next().unwrap();
    let client = ctx.socket(zmq::PUSH).unwrap();
    client.set_linger(0).unwrap();
    client
        .connect(&format!("tcp://lo:0;127.0.0.1:{port}"))
        .unwrap();
    client.send("hello", 0).unwrap();
    server.set_rcvtimeo(5000).unwrap();
    assert_eq!(
        server
            .recv_bytes(0)
            .expect("source-interface connect delivered"),
        b"hello"
    );
}

#[test]
#[allow(unsafe_code)] // fcntl: the zmq crate does not expose the fd's flags.
fn signalling_uses_cloexec_eventfds() {
    // ZMQ_HAVE_EVENTFD(+_CLOEXEC): one eventfd per mailbox instead of a socketpair, and not leaked across exec.
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::PAIR).unwrap();
    socket.set_linger(0).unwrap();
    let fd = socket.get_fd().unwrap() as c_int;
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
    assert!(
        target.to_string_lossy().contains("eventfd"),
        "signaller fd is {target:?}"
    );
    // SAFETY: F_GETFD on an fd that the socket keeps open while we hold it.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    assert!(flags & libc::FD_CLOEXEC != 0, "eventfd not close-on-exec");
}

#[test]
#[allow(unsafe_code)] // getsockopt: only the kernel can say whether the options arrived.
fn tcp_keepalive_options_reach_the_kernel() {
    // ZMQ_HAVE_SO_KEEPALIVE + ZMQ_HAVE_TCP_KEEP{IDLE,INTVL,CNT}: otherwise ZMQ_TCP_KEEPALIVE* are accepted and
    // ignored, and a dead peer behind a NAT or firewall is never noticed.
    let ctx = zmq::Context::new();
    let (server, client, endpoint) = pair(&ctx);
    client.set_tcp_keepalive(1).unwrap();
    client.set_tcp_keepalive_idle(37).unwrap();
    client.set_tcp_keepalive_intvl(11).unwrap();
    client.set_tcp_keepalive_cnt(4).unwrap();
    client.connect(&endpoint).unwrap();
    client.send("x", 0).unwrap();
    server.set_rcvtimeo(5000).unwrap();
    server.recv_bytes(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = fd_targets().into_iter().any(|(fd, target)| {
            // The values are distinctive enough that no other socket of this process carries them.
            target.starts_with("socket:") && {
                let get = |level, name| {
                    let mut value: c_int = 0;
                    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
                    // SAFETY: getsockopt on an fd of this process into a c_int on our stack.
                    let rc = unsafe {
                        libc::getsockopt(
                            fd,
                            level,
                            name,
                            (&mut value as *mut c_int).cast::<c_void>(),
                            &mut len,
                        )
                    };
                    (rc == 0).then_some(value)
                };
                get(libc::SOL_SOCKET, libc::SO_KEEPALIVE) == Some(1)
                    && get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) == Some(37)
                    && get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) == Some(11)
                    && get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT) == Some(4)
            }
        });
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no TCP socket carries the keepalive settings"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[allow(unsafe_code)] // the raw context API: the zmq crate hides context options.
fn io_threads_are_named_and_honour_cpu_affinity() {
    // ZMQ_HAVE_PTHREAD_SETNAME_2 names I/O threads (visible in top/perf); ZMQ_HAVE_PTHREAD_SET_AFFINITY makes
    // ZMQ_THREAD_AFFINITY_CPU_ADD pin them. Uses the raw API because the zmq crate hides context options.
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let target_cpu = cpus - 1;
    // A fresh context used only here; its one socket is closed before the context is terminated.
    // SAFETY: zmq_ctx_new has no preconditions; a null result is checked below.
    let ctx = unsafe { zmq_sys::zmq_ctx_new() };
    assert!(!ctx.is_null());
    // SAFETY: `ctx` is a live context (non-null, not yet terminated); the option takes an int value.
    let rc = unsafe {
        zmq_sys::zmq_ctx_set(
            ctx,
            zmq_sys::ZMQ_THREAD_AFFINITY_CPU_ADD as c_int,
            target_cpu as c_int,
        )
    };
    assert_eq!(rc, 0);
    // A prefix of our own tells this context's I/O thread from those of tests running in parallel.
    // SAFETY: as above.
    let rc = unsafe { zmq_sys::zmq_ctx_set(ctx, zmq_sys::ZMQ_THREAD_NAME_PREFIX as c_int, 731) };
    assert_eq!(rc, 0);
    // SAFETY: `ctx` is a live context; a null result is checked below.
    let raw = unsafe { zmq_sys::zmq_socket(ctx, zmq_sys::ZMQ_PUB as c_int) };
    assert!(!raw.is_null());
    // SAFETY: `raw` is a fresh, non-null socket owned by nothing else; the `Socket` closes it on drop, which
    // happens before `ctx` is terminated.
    let socket = unsafe { zmq::Socket::from_raw(raw) };
    socket.set_linger(0).unwrap();
    socket.bind("tcp://127.0.0.1:*").unwrap();
    // The I/O thread names itself after it starts, so look for it for a bounded time.
    let deadline = Instant::now() + Duration::from_secs(5);
    let io = loop {
        if let Some(found) = thread_comms()
            .into_iter()
            .find(|(comm, _)| comm.starts_with("731/ZMQbg/IO"))
        {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no I/O thread named 731/ZMQbg/IO/n"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let allowed =
        io.1.lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned();
    drop(socket);
    // SAFETY: `ctx` is live and its only socket was closed just above; it is not used afterwards.
    unsafe { zmq_sys::zmq_ctx_term(ctx) };
    assert_eq!(
        allowed,
        target_cpu.to_string(),
        "I/O thread affinity not applied"
    );
}

#[test]
#[allow(unsafe_code)] // ZMQ_BINDTODEVICE has no setter in the zmq crate; geteuid to skip when unprivileged.
fn bindtodevice_is_supported() {
    // ZMQ_HAVE_SO_BINDTODEVICE: needed where two NICs share a subnet. Setting it needs CAP_NET_RAW.
    let ctx = zmq::Context::new();
    let mut server = ctx.socket(zmq::PULL).unwrap();
    server.set_linger(0).unwrap();
    let device = b"lo";
    // SAFETY: a live socket we own and a byte string that outlives the call.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            server.as_mut_ptr(),
            zmq_sys::ZMQ_BINDTODEVICE as c_int,
            device.as_ptr().cast::<c_void>(),
            device.len(),
        )
    };
    assert_eq!(rc, 0, "ZMQ_BINDTODEVICE rejected by libzmq");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // The zmq crate panics on EPERM (an errno it does not know), so do not even try.
        eprintln!("skipping the bind half: SO_BINDTODEVICE needs root (CAP_NET_RAW)");
        return;
    }
    server
        .bind("tcp://127.0.0.1:*")
        .expect("bind with BINDTODEVICE=lo");
    let endpoint = server.get_last_endpoint().unwrap().unwrap();
    let client = ctx.socket(zmq::PUSH).unwrap();
    client.set_linger(0).unwrap();
    client.connect(&endpoint).unwrap();
    client.send("bound", 0).unwrap();
    server.set_rcvtimeo(5000).unwrap();
    assert_eq!(server.recv_bytes(0).unwrap(), b"bound");
}

/// The workspace's own `zmq-sys` links libzmq against libsodium: CURVE exists, a key pair can be made, and a
/// CURVE handshake carries a message only for a client that knows the server's public key.
#[test]
fn curve_is_built_in_and_handshakes() {
    assert_eq!(
        zmq::has("curve"),
        Some(true),
        "libzmq was built without CURVE"
    );
    let server_keys = zmq::CurveKeyPair::new().expect("a CURVE key pair");
    let client_keys = zmq::CurveKeyPair::new().expect("a CURVE key pair");
    let ctx = zmq::Context::new();
    let server = ctx.socket(zmq::PULL).unwrap();
    server.set_linger(0).unwrap();
    server.set_curve_server(true).unwrap();
    server.set_curve_secretkey(&server_keys.secret_key).unwrap();
    server.set_rcvtimeo(5_000).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&server);

    let client = ctx.socket(zmq::PUSH).unwrap();
    client.set_linger(0).unwrap();
    client.set_curve_serverkey(&server_keys.public_key).unwrap();
    client.set_curve_publickey(&client_keys.public_key).unwrap();
    client.set_curve_secretkey(&client_keys.secret_key).unwrap();
    client.connect(&endpoint).unwrap();
    client.send("sealed", 0).unwrap();
    assert_eq!(server.recv_bytes(0).unwrap(), b"sealed");
    assert_eq!(server.get_mechanism().unwrap(), zmq::Mechanism::ZMQ_CURVE);

    // A client that expects another server key never completes the handshake, so nothing it sends arrives.
    let wrong = zmq::CurveKeyPair::new().unwrap();
    let stranger = ctx.socket(zmq::PUSH).unwrap();
    stranger.set_linger(0).unwrap();
    stranger.set_curve_serverkey(&wrong.public_key).unwrap();
    stranger
        .set_curve_publickey(&client_keys.public_key)
        .unwrap();
    stranger
        .set_curve_secretkey(&client_keys.secret_key)
        .unwrap();
    stranger.connect(&endpoint).unwrap();
    stranger.set_sndtimeo(0).unwrap();
    let _ = stranger.send("forged", 0);
    server.set_rcvtimeo(500).unwrap();
    assert!(
        server.recv_bytes(0).is_err(),
        "a client with the wrong server key got through"
    );
}
