//! A `zmq_msg_t` we own, for the hot path. The `zmq` crate's `Message` cannot be copied by reference count
//! (`zmq_msg_copy`), so the tap copy would cost an allocation and a memcpy per message; with our own message
//! the tap copy shares the received buffer.

use std::os::raw::c_int;

pub(crate) struct RawMsg(zmq_sys::zmq_msg_t);

fn last_error() -> zmq::Error {
    // SAFETY: reads the calling thread's errno as set by the failed libzmq call just made.
    zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() })
}

impl RawMsg {
    pub(crate) fn new() -> Self {
        let mut msg = zmq_sys::zmq_msg_t::default();
        // SAFETY: `msg` is a valid, writable zmq_msg_t; zmq_msg_init cannot fail.
        unsafe { zmq_sys::zmq_msg_init(&mut msg) };
        RawMsg(msg)
    }

    /// Receives into this message (its previous content is released by libzmq).
    #[inline]
    pub(crate) fn recv(
        &mut self,
        socket: &mut zmq::Socket,
        flags: c_int,
    ) -> Result<(), zmq::Error> {
        // SAFETY: the socket pointer is live for the call (we hold `&mut`), and `self.0` is an initialised msg.
        let rc = unsafe { zmq_sys::zmq_msg_recv(&mut self.0, socket.as_mut_ptr(), flags) };
        if rc < 0 {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    /// Sends this message; on success libzmq leaves it empty (re-initialised) and it can be received into again.
    /// On failure it still holds its content.
    #[inline]
    pub(crate) fn send(
        &mut self,
        socket: &mut zmq::Socket,
        flags: c_int,
    ) -> Result<(), zmq::Error> {
        // SAFETY: as in `recv`.
        let rc = unsafe { zmq_sys::zmq_msg_send(&mut self.0, socket.as_mut_ptr(), flags) };
        if rc < 0 {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    /// Makes this message share `src`'s content (a reference count for large messages, a small copy otherwise).
    #[inline]
    pub(crate) fn copy_from(&mut self, src: &mut RawMsg) -> Result<(), zmq::Error> {
        // SAFETY: both are initialised msgs; zmq_msg_copy releases our old content first.
        let rc = unsafe { zmq_sys::zmq_msg_copy(&mut self.0, &mut src.0) };
        if rc < 0 {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    /// Replaces this message's content with a copy of `bytes` (one allocation and copy, done by libzmq).
    pub(crate) fn set_bytes(&mut self, bytes: &[u8]) -> Result<(), zmq::Error> {
        // SAFETY: `self.0` is initialised; closing releases its old content, and it is re-initialised below
        // before any other use.
        unsafe { zmq_sys::zmq_msg_close(&mut self.0) };
        // SAFETY: `self.0` is closed, so initialising it again leaks nothing.
        if unsafe { zmq_sys::zmq_msg_init_size(&mut self.0, bytes.len()) } != 0 {
            let err = last_error();
            // SAFETY: as above; an empty message cannot fail to initialise, so `self` stays valid.
            unsafe { zmq_sys::zmq_msg_init(&mut self.0) };
            return Err(err);
        }
        if !bytes.is_empty() {
            // SAFETY: libzmq gave the message a buffer of exactly `bytes.len()` bytes, which this copy fills; it
            // cannot overlap `bytes`, which this message's new buffer did not exist for.
            unsafe {
                let data = zmq_sys::zmq_msg_data(&mut self.0) as *mut u8;
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
            }
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn more(&self) -> bool {
        // SAFETY: `self.0` is initialised.
        unsafe { zmq_sys::zmq_msg_more(&self.0) != 0 }
    }

    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: data/size describe the message's buffer, valid while the message is not modified; the
        // returned borrow of `self` prevents modification for its lifetime. An empty message may return a
        // null or dangling pointer, so handle size 0 without touching it.
        unsafe {
            let size = zmq_sys::zmq_msg_size(&self.0);
            if size == 0 {
                return &[];
            }
            // zmq_msg_data takes a mutable pointer but only reads the message's data pointer.
            let data = zmq_sys::zmq_msg_data(std::ptr::addr_of!(self.0).cast_mut());
            std::slice::from_raw_parts(data as *const u8, size)
        }
    }

    /// The ZAP user id of the peer this message came from (`User-Id`), when it was accepted through ZAP.
    pub(crate) fn user_id(&self) -> Option<&str> {
        // SAFETY: `self.0` is initialised; the property name is a NUL-terminated literal; libzmq returns null or a
        // NUL-terminated string owned by the message's metadata, which lives as long as the message's content,
        // and the returned borrow of `self` keeps the message unmodified for its lifetime.
        let ptr = unsafe { zmq_sys::zmq_msg_gets(&self.0, c"User-Id".as_ptr()) };
        if ptr.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated, valid for the borrow of `self` (above).
        let text = unsafe { std::ffi::CStr::from_ptr(ptr) };
        text.to_str().ok().filter(|u| !u.is_empty())
    }
}

impl Drop for RawMsg {
    fn drop(&mut self) {
        // SAFETY: `self.0` is initialised; close never fails for a valid message.
        unsafe { zmq_sys::zmq_msg_close(&mut self.0) };
    }
}
