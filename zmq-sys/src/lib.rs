//! Raw FFI declarations for libzmq 4.3, written from its public header `zmq.h`, for the `zmq` crate (which this
//! crate replaces through `[patch.crates-io]`) and for the few calls tickbox makes below it (`zmqx`).
//!
//! It exists because the crates.io `zmq-sys` builds libzmq without libsodium, so CURVE is missing; this one links
//! libsodium (see build.rs) and `zmq::has("curve")` answers true. The integer constants are generated from the
//! header at build time; the types and functions below are the stable (non-draft) API the workspace uses.

#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_long, c_short, c_uchar, c_void};

pub mod errno;

/// A file descriptor, as `zmq_pollitem_t` and `ZMQ_FD` carry it on Unix.
pub type RawFd = std::os::unix::io::RawFd;

include!(concat!(env!("OUT_DIR"), "/constants.rs"));

/// `zmq_msg_t`: 64 opaque bytes, aligned to a pointer, that libzmq initialises and owns the meaning of.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct zmq_msg_t {
    /// Opaque to Rust; only libzmq reads or writes it.
    pub opaque: [c_uchar; 64],
}

impl Default for zmq_msg_t {
    /// All zero bytes: the state `zmq_msg_init*` expects to overwrite.
    fn default() -> Self {
        zmq_msg_t { opaque: [0; 64] }
    }
}

impl std::fmt::Debug for zmq_msg_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("zmq_msg_t")
    }
}

/// `zmq_free_fn`: called by libzmq when it no longer needs the data of a message made by `zmq_msg_init_data`.
pub type zmq_free_fn = Option<unsafe extern "C" fn(data: *mut c_void, hint: *mut c_void)>;

/// `zmq_pollitem_t`: one socket (or, with a null socket, one file descriptor) for `zmq_poll`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct zmq_pollitem_t {
    /// The libzmq socket, or null to poll `fd`.
    pub socket: *mut c_void,
    /// The descriptor polled when `socket` is null.
    pub fd: RawFd,
    /// `ZMQ_POLLIN` | `ZMQ_POLLOUT` | `ZMQ_POLLERR` asked for.
    pub events: c_short,
    /// What `zmq_poll` found.
    pub revents: c_short,
}

extern "C" {
    /// The calling thread's libzmq error number.
    pub fn zmq_errno() -> c_int;
    /// A static description of `errnum`.
    pub fn zmq_strerror(errnum: c_int) -> *const c_char;
    /// The linked library's version.
    pub fn zmq_version(major: *mut c_int, minor: *mut c_int, patch: *mut c_int);

    /// A new context.
    pub fn zmq_ctx_new() -> *mut c_void;
    /// Terminates a context, waiting for its sockets to close.
    pub fn zmq_ctx_term(context: *mut c_void) -> c_int;
    /// Makes blocking calls on the context's sockets return ETERM.
    pub fn zmq_ctx_shutdown(context: *mut c_void) -> c_int;
    /// Sets a context option.
    pub fn zmq_ctx_set(context: *mut c_void, option: c_int, optval: c_int) -> c_int;
    /// Reads a context option.
    pub fn zmq_ctx_get(context: *mut c_void, option: c_int) -> c_int;

    /// An empty message.
    pub fn zmq_msg_init(msg: *mut zmq_msg_t) -> c_int;
    /// A message of `size` uninitialised bytes owned by libzmq.
    pub fn zmq_msg_init_size(msg: *mut zmq_msg_t, size: usize) -> c_int;
    /// A message over caller-owned `data`, released through `ffn(data, hint)`.
    pub fn zmq_msg_init_data(
        msg: *mut zmq_msg_t,
        data: *mut c_void,
        size: usize,
        ffn: zmq_free_fn,
        hint: *mut c_void,
    ) -> c_int;
    /// Sends `msg` on socket `s` (which takes ownership on success).
    pub fn zmq_msg_send(msg: *mut zmq_msg_t, s: *mut c_void, flags: c_int) -> c_int;
    /// Receives into `msg` from socket `s`.
    pub fn zmq_msg_recv(msg: *mut zmq_msg_t, s: *mut c_void, flags: c_int) -> c_int;
    /// Releases a message.
    pub fn zmq_msg_close(msg: *mut zmq_msg_t) -> c_int;
    /// Moves `src` into `dest`.
    pub fn zmq_msg_move(dest: *mut zmq_msg_t, src: *mut zmq_msg_t) -> c_int;
    /// Makes `dest` share `src`'s content.
    pub fn zmq_msg_copy(dest: *mut zmq_msg_t, src: *mut zmq_msg_t) -> c_int;
    /// The message's bytes.
    pub fn zmq_msg_data(msg: *mut zmq_msg_t) -> *mut c_void;
    /// The message's length.
    pub fn zmq_msg_size(msg: *const zmq_msg_t) -> usize;
    /// Whether more frames of the same message follow.
    pub fn zmq_msg_more(msg: *const zmq_msg_t) -> c_int;
    /// An integer message property.
    pub fn zmq_msg_get(msg: *const zmq_msg_t, property: c_int) -> c_int;
    /// Sets an integer message property.
    pub fn zmq_msg_set(msg: *mut zmq_msg_t, property: c_int, optval: c_int) -> c_int;
    /// A metadata property of a received message (`User-Id`, `Peer-Address`, ...), or null.
    pub fn zmq_msg_gets(msg: *const zmq_msg_t, property: *const c_char) -> *const c_char;

    /// A new socket of `type_` in `context`.
    pub fn zmq_socket(context: *mut c_void, type_: c_int) -> *mut c_void;
    /// Closes a socket.
    pub fn zmq_close(s: *mut c_void) -> c_int;
    /// Sets a socket option.
    pub fn zmq_setsockopt(
        s: *mut c_void,
        option: c_int,
        optval: *const c_void,
        optvallen: usize,
    ) -> c_int;
    /// Reads a socket option; `optvallen` is the buffer size in and the value's size out.
    pub fn zmq_getsockopt(
        s: *mut c_void,
        option: c_int,
        optval: *mut c_void,
        optvallen: *mut usize,
    ) -> c_int;
    /// Binds to an endpoint.
    pub fn zmq_bind(s: *mut c_void, addr: *const c_char) -> c_int;
    /// Connects to an endpoint.
    pub fn zmq_connect(s: *mut c_void, addr: *const c_char) -> c_int;
    /// Undoes a bind.
    pub fn zmq_unbind(s: *mut c_void, addr: *const c_char) -> c_int;
    /// Undoes a connect.
    pub fn zmq_disconnect(s: *mut c_void, addr: *const c_char) -> c_int;
    /// Sends `len` bytes from `buf` as one frame.
    pub fn zmq_send(s: *mut c_void, buf: *const c_void, len: usize, flags: c_int) -> c_int;
    /// Sends `len` bytes that libzmq may reference without copying (they must outlive the send).
    pub fn zmq_send_const(s: *mut c_void, buf: *const c_void, len: usize, flags: c_int) -> c_int;
    /// Receives at most `len` bytes of one frame into `buf`; returns the frame's full length.
    pub fn zmq_recv(s: *mut c_void, buf: *mut c_void, len: usize, flags: c_int) -> c_int;
    /// Publishes the socket's events on a PAIR endpoint.
    pub fn zmq_socket_monitor(s: *mut c_void, addr: *const c_char, events: c_int) -> c_int;

    /// Waits for any of `items` to be ready, up to `timeout` ms (-1 forever).
    pub fn zmq_poll(items: *mut zmq_pollitem_t, nitems: c_int, timeout: c_long) -> c_int;

    /// The built-in proxy between two sockets.
    pub fn zmq_proxy(frontend: *mut c_void, backend: *mut c_void, capture: *mut c_void) -> c_int;
    /// The built-in proxy, steered by commands on `control`.
    pub fn zmq_proxy_steerable(
        frontend: *mut c_void,
        backend: *mut c_void,
        capture: *mut c_void,
        control: *mut c_void,
    ) -> c_int;

    /// 1 when the library was built with `capability` ("curve", "ipc", ...).
    pub fn zmq_has(capability: *const c_char) -> c_int;

    /// Z85-encodes `size` bytes (a multiple of 4) into `dest` (`size * 5 / 4 + 1` bytes).
    pub fn zmq_z85_encode(dest: *mut c_char, data: *const u8, size: usize) -> *mut c_char;
    /// Decodes a Z85 string (length a multiple of 5) into `dest`.
    pub fn zmq_z85_decode(dest: *mut u8, string: *const c_char) -> *mut u8;
    /// A new CURVE key pair, both halves Z85 (41 bytes each with the terminator).
    pub fn zmq_curve_keypair(z85_public_key: *mut c_char, z85_secret_key: *mut c_char) -> c_int;
    /// The Z85 public key that belongs to a Z85 secret key.
    pub fn zmq_curve_public(z85_public_key: *mut c_char, z85_secret_key: *const c_char) -> c_int;
}
