//! CPU time used so far by the calling thread or by the whole process, for benches: on a machine shared with
//! other work, wall-clock rates swing with the load while the CPU time spent per record does not.

use std::time::Duration;

/// CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time this process has used, all its threads together.
pub fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Reads a CPU-time clock to the nanosecond (`/proc` and `getrusage` count in ticks or microseconds).
#[allow(unsafe_code)] // clock_gettime: std has no CPU-time clock.
fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one `timespec` through the pointer, which is a live local.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_works_is_charged_for_it_and_one_that_sleeps_is_not() {
        // Spins until charged 5 ms, however busy the machine; bounded, in case the clock never moves.
        let t0 = thread_cpu();
        let give_up = std::time::Instant::now() + Duration::from_secs(5);
        let mut x = 1u64;
        while thread_cpu() - t0 < Duration::from_millis(5) && std::time::Instant::now() < give_up {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(thread_cpu() - t0 >= Duration::from_millis(5));
        let t1 = thread_cpu();
        std::thread::sleep(Duration::from_millis(30));
        assert!(thread_cpu() - t1 < Duration::from_millis(10));
        assert!(process_cpu() >= thread_cpu());
    }
}
