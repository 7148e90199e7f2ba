//! The tuned context on the machine running the tests: each libzmq I/O thread must run where the config put it,
//! under the configured name, as the kernel reports it in `/proc/self/task/*/{comm,status}`.

#![cfg(target_os = "linux")]

use tickbox_zmqx::context::{build_with_threads, ContextConfig};

/// A thread's name and allowed CPUs, or `None` when it exited since the directory was listed (the other test in
/// this binary starts and ends threads of its own meanwhile).
fn task(tid: i32) -> Option<(String, String)> {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim()
        .to_owned();
    Some((comm.trim_end().to_owned(), allowed))
}

fn tasks_named(prefix: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(task)
        .filter(|(comm, _)| comm.starts_with(prefix))
        .collect();
    found.sort();
    found
}

#[test]
fn each_io_thread_runs_on_its_configured_cpu_under_its_name() {
    let cpus: Vec<usize> = tickbox_zmqx::context::allowed_cpus()
        .unwrap()
        .into_iter()
        .collect();
    // Two I/O threads on two different CPUs where there are two (this machine: 0 and 1), reversed so that the
    // placement cannot be an accident of inheritance.
    let want: Vec<usize> = if cpus.len() >= 2 {
        vec![cpus[1], cpus[0]]
    } else {
        vec![cpus[0], cpus[0]]
    };
    let config = ContextConfig {
        io_threads: 2,
        io_thread_cpus: want.clone(),
        thread_name_prefix: "tq7".into(),
        ..ContextConfig::default()
    };
    let (ctx, threads) = build_with_threads(&config).unwrap();
    assert_eq!(threads.len(), 2);
    // A socket with traffic on each I/O thread: the threads serve it where they were put.
    let pull = ctx.socket(zmq::PULL).unwrap();
    pull.set_linger(0).unwrap();
    pull.set_affinity(0b01).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&pull);
    let push = ctx.socket(zmq::PUSH).unwrap();
    push.set_linger(0).unwrap();
    push.set_affinity(0b10).unwrap();
    push.connect(&endpoint).unwrap();
    push.send(&b"x"[..], 0).unwrap();
    pull.set_rcvtimeo(5_000).unwrap();
    assert_eq!(pull.recv_bytes(0).unwrap(), b"x");

    let seen = tasks_named("tq7/");
    assert_eq!(
        seen,
        vec![
            ("tq7/ZMQbg/IO/0".to_owned(), want[0].to_string()),
            ("tq7/ZMQbg/IO/1".to_owned(), want[1].to_string()),
        ],
        "I/O threads are not where the config put them"
    );
    for t in &threads {
        let (_, allowed) = task(t.tid).expect("our own I/O thread is alive");
        assert_eq!(allowed, want[t.index].to_string());
    }
    drop(push);
    drop(pull);
}

#[test]
fn io_threads_do_not_inherit_the_affinity_of_a_pinned_caller() {
    let cpus: Vec<usize> = tickbox_zmqx::context::allowed_cpus()
        .unwrap()
        .into_iter()
        .collect();
    if cpus.len() < 2 {
        eprintln!("one CPU: nothing to tell apart");
        return;
    }
    let all = format!("{}-{}", cpus[0], cpus[cpus.len() - 1]);
    let contiguous = cpus.len() == cpus[cpus.len() - 1] - cpus[0] + 1;
    let first = cpus[0];
    let handle = std::thread::spawn(move || {
        // A pinned shard thread builds the context: its I/O thread must still get every CPU.
        tickbox_zmqx::pin_current_thread(first).unwrap();
        let (ctx, threads) = build_with_threads(&ContextConfig {
            thread_name_prefix: "tq8".into(),
            ..ContextConfig::default()
        })
        .unwrap();
        let placed = task(threads[0].tid).expect("our own I/O thread is alive");
        drop(ctx);
        placed
    });
    let (name, allowed) = handle.join().unwrap();
    assert_eq!(name, "tq8/ZMQbg/IO/0");
    if contiguous {
        assert_eq!(allowed, all);
    }
}
