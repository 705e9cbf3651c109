//! [`Mask`]: a keyed permutation of the IDs, for public IDs that show neither their time,
//! their node nor the volume between two of them.
//!
//! The permutation is Speck64/128 (Beaulieu et al., "The SIMON and SPECK Families of
//! Lightweight Block Ciphers", IACR ePrint 2013/404), the `speck-cipher` crate: a
//! 64-bit block cipher with a 128-bit key, on the ID's eight bytes, big-endian. It is
//! cycle-walked (Black and Rogaway, "Ciphers with Arbitrary Finite Domains", CT-RSA 2002)
//! within each half of the `u64`s: the cipher runs again on its own output until that lies
//! in the same half as the input, `[0, 2^63)` or `[2^63, 2^64)`. So an ID that fits a
//! signed `BIGINT` masks to one that does too, and each half is permuted: `unmask` walks
//! back with the inverse cipher. A walk takes two encryptions on average (each lands in
//! either half with odds of one half); more than `k` with odds of 2^-k.
//!
//! [`Mask::mask_all`] and [`Mask::unmask_all`] run the same cipher on 16 IDs at once: its
//! rounds written out here from the paper, for vector instructions (AVX-512 or AVX2 where
//! the processor has them, chosen when the program runs), and tested equal to the crate's
//! under random keys.

use super::id::Id;
use crate::io::IoCause;
use multiversion::multiversion;
use speck_cipher::Speck64_128;
use speck_cipher::cipher::{Block, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use std::fmt;
use std::path::Path;
use zeroize::Zeroize;

/// A key for [`Mask`] that cannot be used (feature `mask`). Permanent. It
/// never shows the key or a character of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MaskKeyError {
    /// Hex text of another length than 32 digits.
    #[error("key has {length} characters: a key is 32 hex digits (16 bytes)")]
    HexLength {
        /// The number of characters given.
        length: usize,
    },
    /// Hex text with a character other than a hex digit.
    #[error(
        "key has a character other than a hex digit at byte {index}: a key is 32 hex digits (0-9, a-f, A-F)"
    )]
    InvalidHex {
        /// The byte offset of the first such character.
        index: usize,
    },
    /// A key file of another size than 16 raw bytes or 32 hex digits.
    #[error(
        "key file {path} holds {size} bytes: a key file holds 16 raw bytes, or 32 hex digits and a line end"
    )]
    FileSize {
        /// The file.
        path: String,
        /// Its size in bytes.
        size: u64,
    },
    /// A key file that the group or others may read or write.
    #[error(
        "key file {path} has mode {mode:o}: a key file may be read and written by its owner alone (chmod 600)"
    )]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A key file that cannot be read.
    #[error("cannot read key file {path}: {cause}")]
    Read {
        /// The file.
        path: String,
        /// The operating system's error.
        cause: IoCause,
    },
}

/// A keyed, reversible permutation of the IDs (feature `mask`): [`mask`](Self::mask) and
/// [`unmask`](Self::unmask) are exact inverses, and an ID below 2^63 (any ID that fits a
/// signed `BIGINT`) masks to one below 2^63.
///
/// What it hides: an ID's time, node and sequence, the order of two IDs, and the number of
/// IDs minted between them: without the key, masked IDs of consecutive IDs look unrelated.
/// What it does not: the key's secrecy is everything (whoever holds it unmasks every ID
/// ever masked with it, and an ID cannot be taken back); a masked ID is as unique as the ID,
/// not a secret or a credential; the same ID always masks the same, so a masked ID can be
/// recognized where it is seen again.
///
/// # Examples
///
/// ```
/// use atomflake::{Id, Mask};
///
/// let mask = Mask::new(*b"sixteen byte key");
/// let id = Id::new(1050118621198921728);
/// let masked = mask.mask(id);
/// assert_ne!(masked, id);
/// assert!(masked.get() <= i64::MAX as u64);
/// assert_eq!(mask.unmask(masked), id);
/// ```
#[derive(Clone)]
pub struct Mask {
    cipher: Speck64_128,
    round_keys: RoundKeys,
}

/// The bytes of a key.
pub const MASK_KEY_BYTES: usize = 16;

impl Mask {
    /// A mask with the 128-bit `key`.
    pub fn new(key: [u8; MASK_KEY_BYTES]) -> Mask {
        Mask {
            cipher: Speck64_128::new(&key.into()),
            round_keys: RoundKeys::new(&key),
        }
    }

    /// A mask with the key written as 32 hex digits (any case), as a key file holds it.
    ///
    /// # Errors
    ///
    /// [`MaskKeyError::HexLength`] or [`MaskKeyError::InvalidHex`], naming the length or
    /// the character; the key itself is never in an error.
    pub fn from_hex(text: &str) -> Result<Mask, MaskKeyError> {
        if text.len() != 2 * MASK_KEY_BYTES {
            return Err(MaskKeyError::HexLength { length: text.len() });
        }
        let mut key = [0; MASK_KEY_BYTES];
        for (index, byte) in text.bytes().enumerate() {
            let digit = char::from(byte)
                .to_digit(16)
                .ok_or(MaskKeyError::InvalidHex { index })?;
            // A hex digit is below 16: one byte.
            #[allow(clippy::cast_possible_truncation)]
            let digit = digit as u8;
            key[index / 2] |= digit << (4 * (1 - index % 2));
        }
        Ok(Mask::new(key))
    }

    /// A mask with the key in the file at `path`: 16 raw bytes, or 32 hex digits (one line
    /// end after them is allowed). The file must be readable by its owner alone (no
    /// permission for the group or others), as SSH requires of a private key.
    ///
    /// # Errors
    ///
    /// [`MaskKeyError::Read`] when the file cannot be read, [`MaskKeyError::Permissions`]
    /// when others may read or write it, [`MaskKeyError::FileSize`] for any other size,
    /// and the errors of [`from_hex`](Self::from_hex). Each names the path, never the key.
    pub fn from_key_file(path: &Path) -> Result<Mask, MaskKeyError> {
        let read = |error: std::io::Error| MaskKeyError::Read {
            path: path.display().to_string(),
            cause: IoCause::from(error),
        };
        let metadata = std::fs::metadata(path).map_err(read)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(MaskKeyError::Permissions {
                    path: path.display().to_string(),
                    mode,
                });
            }
        }
        let bytes = std::fs::read(path).map_err(read)?;
        let hex = bytes
            .strip_suffix(b"\r\n")
            .or_else(|| bytes.strip_suffix(b"\n"))
            .unwrap_or(&bytes);
        match (bytes.len(), <[u8; MASK_KEY_BYTES]>::try_from(&bytes[..])) {
            (_, Ok(key)) => Ok(Mask::new(key)),
            _ if hex.len() == 2 * MASK_KEY_BYTES => std::str::from_utf8(hex)
                .map_err(|error| MaskKeyError::InvalidHex {
                    index: error.valid_up_to(),
                })
                .and_then(Mask::from_hex),
            (size, Err(_)) => Err(MaskKeyError::FileSize {
                path: path.display().to_string(),
                size: size as u64,
            }),
        }
    }

    /// The masked ID of `id`: below 2^63 when `id` is.
    #[inline]
    pub fn mask(&self, id: Id) -> Id {
        Id::new(walk(id.get(), |x| self.encrypt(x)))
    }

    /// The ID whose masked ID is `masked`: `unmask(mask(id)) == id` for every ID.
    #[inline]
    pub fn unmask(&self, masked: Id) -> Id {
        Id::new(walk(masked.get(), |x| self.decrypt(x)))
    }

    /// [`mask`](Self::mask) of each ID in `ids`, in place: the same IDs as one call each,
    /// several times faster in bulk, as 16 IDs go through the cipher's rounds at once.
    pub fn mask_all(&self, ids: &mut [Id]) {
        for chunk in ids.chunks_mut(CHUNK) {
            walk_chunk(chunk, |x, y| encrypt(&self.round_keys.0, x, y));
        }
    }

    /// [`unmask`](Self::unmask) of each ID in `ids`, in place.
    pub fn unmask_all(&self, ids: &mut [Id]) {
        for chunk in ids.chunks_mut(CHUNK) {
            walk_chunk(chunk, |x, y| decrypt(&self.round_keys.0, x, y));
        }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mut block = Block::<Speck64_128>::from(x.to_be_bytes());
        self.cipher.encrypt_block(&mut block);
        u64::from_be_bytes(block.into())
    }

    fn decrypt(&self, x: u64) -> u64 {
        let mut block = Block::<Speck64_128>::from(x.to_be_bytes());
        self.cipher.decrypt_block(&mut block);
        u64::from_be_bytes(block.into())
    }
}

/// `step` applied to `x` until its result lies in `x`'s half of the `u64`s: it ends, as
/// `step` is a permutation whose cycle through `x` comes back to `x`.
#[inline]
fn walk(x: u64, step: impl Fn(u64) -> u64) -> u64 {
    let mut y = step(x);
    while (y ^ x) >> 63 != 0 {
        y = step(y);
    }
    y
}

/// Speck64/128's rounds.
const ROUNDS: usize = 27;

/// The blocks that [`RoundKeys`] encrypts at once, as words side by side (the first words
/// of the blocks in one array, the second in another), so that each step of a round is one
/// vector instruction for several blocks.
const LANES: usize = 16;

/// Speck64/128's round keys, for encrypting [`LANES`] blocks at once: the same cipher as the
/// `speck-cipher` crate's, which [`Mask::mask`] runs (the tests compare the two on random
/// keys and IDs), written so that the compiler can give each round's steps to vector
/// instructions. A block's first word is the ID's high half, its second the low half, as
/// the crate reads the ID's big-endian bytes. Cleared when dropped.
#[derive(Clone)]
struct RoundKeys([u32; ROUNDS]);

impl RoundKeys {
    /// The key schedule of the paper (section 4.2): the round function, keyed by the round's
    /// number, run over the key's words.
    fn new(key: &[u8; MASK_KEY_BYTES]) -> RoundKeys {
        let word = |i: usize| u32::from_be_bytes([key[i], key[i + 1], key[i + 2], key[i + 3]]);
        let mut k = [0_u32; ROUNDS];
        let mut l = [word(8), word(4), word(0)];
        k[0] = word(12);
        for (i, number) in (0..ROUNDS - 1).zip(0_u32..) {
            let (mut x, mut y) = ([l[i % 3]], [k[i]]);
            round(&mut x, &mut y, number);
            (l[i % 3], k[i + 1]) = (x[0], y[0]);
        }
        l.zeroize();
        RoundKeys(k)
    }
}

/// Speck64's encryption of each block of `x` and `y` with the round keys `keys`, compiled
/// also for the vector instructions of AVX2 and AVX-512 and run with the widest that the
/// processor has.
#[multiversion(targets("x86_64+avx2+avx512f+avx512vl", "x86_64+avx2"))]
fn encrypt(keys: &[u32; ROUNDS], x: &mut [u32; LANES], y: &mut [u32; LANES]) {
    for &key in keys {
        round(x, y, key);
    }
}

/// Speck64's decryption, as [`encrypt`].
#[multiversion(targets("x86_64+avx2+avx512f+avx512vl", "x86_64+avx2"))]
fn decrypt(keys: &[u32; ROUNDS], x: &mut [u32; LANES], y: &mut [u32; LANES]) {
    for &key in keys.iter().rev() {
        for (x, y) in x.iter_mut().zip(y.iter_mut()) {
            *y = (*y ^ *x).rotate_right(3);
            *x = (*x ^ key).wrapping_sub(*y).rotate_left(8);
        }
    }
}

/// One round of Speck64 with the round key `key`, on each block of `x` and `y`.
#[inline]
fn round<const N: usize>(x: &mut [u32; N], y: &mut [u32; N], key: u32) {
    for (x, y) in x.iter_mut().zip(y.iter_mut()) {
        *x = x.rotate_right(8).wrapping_add(*y) ^ key;
        *y = y.rotate_left(3) ^ *x;
    }
}

impl Drop for RoundKeys {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// The IDs [`walk_chunk`] takes at once.
const CHUNK: usize = 256;

/// [`walk`] of each of `ids` (at most [`CHUNK`]), in rounds: one step for every ID still
/// out of its half, [`LANES`] IDs at a time, with no branch on an ID's value. Each round
/// leaves about half.
#[inline]
fn walk_chunk(ids: &mut [Id], step: impl Fn(&mut [u32; LANES], &mut [u32; LANES])) {
    let mut y = [0_u64; CHUNK];
    let mut pending = [0_u8; CHUNK];
    for ((i, id), index) in ids.iter().enumerate().zip(0..=u8::MAX) {
        y[i] = id.get();
        pending[i] = index;
    }
    let mut left = ids.len();
    while left > 0 {
        for group in pending[..left].chunks(LANES) {
            let (mut high, mut low) = ([0_u32; LANES], [0_u32; LANES]);
            for (lane, &i) in group.iter().enumerate() {
                (high[lane], low[lane]) = halves(y[usize::from(i)]);
            }
            step(&mut high, &mut low);
            for (lane, &i) in group.iter().enumerate() {
                y[usize::from(i)] = u64::from(high[lane]) << 32 | u64::from(low[lane]);
            }
        }
        let mut still = 0;
        for j in 0..left {
            let i = usize::from(pending[j]);
            pending[still] = pending[j];
            still += usize::from((y[i] ^ ids[i].get()) >> 63 != 0);
        }
        left = still;
    }
    for (id, &y) in ids.iter_mut().zip(&y) {
        *id = Id::new(y);
    }
}

/// The high and the low 32 bits of `x`.
#[allow(clippy::cast_possible_truncation)]
fn halves(x: u64) -> (u32, u32) {
    ((x >> 32) as u32, x as u32)
}

impl fmt::Debug for Mask {
    /// Never the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mask { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's test vector (appendix C), as the `speck-cipher` crate's tests read it: the printed
    /// words big-endian, the key's last word first.
    #[test]
    fn speck64_128_gives_the_papers_vector() {
        let key = [
            0x1b, 0x1a, 0x19, 0x18, 0x13, 0x12, 0x11, 0x10, 0x0b, 0x0a, 0x09, 0x08, 0x03, 0x02, 0x01, 0x00,
        ];
        let mask = Mask::new(key);
        assert_eq!(mask.encrypt(0x3b72_6574_7475_432d), 0x8c6f_a548_454e_028b);
        assert_eq!(mask.decrypt(0x8c6f_a548_454e_028b), 0x3b72_6574_7475_432d);
        // Its output is above 2^63, so the mask walks on: the masked ID is another.
        let masked = mask.mask(Id::new(0x3b72_6574_7475_432d));
        assert!(masked.get() < 1 << 63);
        assert_eq!(mask.unmask(masked), Id::new(0x3b72_6574_7475_432d));
    }

    #[test]
    fn a_hex_key_is_the_same_key_and_bad_hex_names_the_length_or_the_place() {
        let mask = Mask::from_hex("1B1A191813121110" /* any case */).err();
        assert_eq!(mask, Some(MaskKeyError::HexLength { length: 16 }));
        let hex = Mask::from_hex("1b1a1918131211100B0A090803020100").unwrap();
        let key = [
            0x1b, 0x1a, 0x19, 0x18, 0x13, 0x12, 0x11, 0x10, 0x0b, 0x0a, 0x09, 0x08, 0x03, 0x02, 0x01, 0x00,
        ];
        assert_eq!(hex.mask(Id::new(12345)), Mask::new(key).mask(Id::new(12345)));
        assert_eq!(
            Mask::from_hex("1b1a1918131211100b0a09080302010g").err(),
            Some(MaskKeyError::InvalidHex { index: 31 })
        );
        assert_eq!(format!("{hex:?}"), "Mask { .. }");
    }

    #[test]
    fn the_halves_ends_round_trip_and_stay_in_their_half() {
        let mask = Mask::new(*b"0123456789abcdef");
        for id in [0, 1, (1 << 63) - 1, 1 << 63, u64::MAX, 1 << 53, (1 << 53) - 1] {
            let masked = mask.mask(Id::new(id));
            assert_eq!(masked.get() >> 63, id >> 63, "{id}");
            assert_eq!(mask.unmask(masked), Id::new(id), "{id}");
        }
    }
}
