//! One-dimensional `.npy` arrays of unsigned integers (NumPy's format 1.0), written whole and
//! read through a memory map: `np.load(path, mmap_mode="r")` reads the same files.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

/// The element types the data folder stores, little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// `<u2`: token ids of a vocabulary of at most 65 536 tokens.
    U16,
    /// `<u4`: token ids of a larger vocabulary.
    U32,
    /// `<u8`: offsets and counts.
    U64,
}

impl Dtype {
    /// The narrowest type that holds the ids of a `vocab_size`-token vocabulary.
    pub fn for_vocab(vocab_size: usize) -> Self {
        if vocab_size <= 1 << 16 {
            Self::U16
        } else {
            Self::U32
        }
    }

    fn descr(self) -> &'static str {
        match self {
            Self::U16 => "<u2",
            Self::U32 => "<u4",
            Self::U64 => "<u8",
        }
    }

    fn width(self) -> usize {
        match self {
            Self::U16 => 2,
            Self::U32 => 4,
            Self::U64 => 8,
        }
    }
}

const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";

/// `values` as the bytes of a `.npy` file of `dtype` (values must fit it).
pub fn npy_bytes(dtype: Dtype, values: impl ExactSizeIterator<Item = u64>) -> Vec<u8> {
    let header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}",
        dtype.descr(),
        values.len()
    );
    // The header ends in a newline and pads the data to a multiple of 64 bytes.
    let unpadded = MAGIC.len() + 2 + header.len() + 1;
    let header_len = header.len() + 1 + unpadded.next_multiple_of(64) - unpadded;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 2 + header_len + values.len() * dtype.width());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(header_len as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(MAGIC.len() + 2 + header_len - 1, b' ');
    bytes.push(b'\n');
    for value in values {
        match dtype {
            Dtype::U16 => bytes.extend_from_slice(&(value as u16).to_le_bytes()),
            Dtype::U32 => bytes.extend_from_slice(&(value as u32).to_le_bytes()),
            Dtype::U64 => bytes.extend_from_slice(&value.to_le_bytes()),
        }
    }
    bytes
}

/// A memory-mapped one-dimensional `.npy` array.
pub struct NpyArray {
    map: Mmap,
    dtype: Dtype,
    data_start: usize,
    len: usize,
}

impl NpyArray {
    /// Maps the array at `path`.
    ///
    /// # Errors
    /// A one-line reason if the file is not a 1-D little-endian `u2`/`u4`/`u8` `.npy` array
    /// whose size matches its header.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = File::open(path).map_err(|e| e.to_string())?;
        // Safety: the data folder is written once and renamed into place; nothing writes
        // its files afterwards (a file changed under the map would change what is read).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| e.to_string())?;
        // Batches read scattered sequences: fault in the page read, not its neighbours
        // (read-ahead would map pages no batch asks for, and count them in the RSS).
        #[cfg(unix)]
        map.advise(memmap2::Advice::Random)
            .map_err(|e| e.to_string())?;
        let not_npy = || "not a 1-D .npy array of u2, u4 or u8".to_string();
        if map.len() < 10 || &map[..6] != b"\x93NUMPY" {
            return Err(not_npy());
        }
        let header_len = usize::from(u16::from_le_bytes([map[8], map[9]]));
        let data_start = 10 + header_len;
        let header = map
            .get(10..data_start)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or_else(not_npy)?;
        let dtype = [Dtype::U16, Dtype::U32, Dtype::U64]
            .into_iter()
            .find(|d| header.contains(&format!("'descr': '{}'", d.descr())))
            .ok_or_else(not_npy)?;
        let len: usize = header
            .split("'shape': (")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(not_npy)?;
        if map.len() != data_start + len * dtype.width() {
            return Err(format!(
                "holds {} bytes of data, its header says {len} values of {} bytes",
                map.len().saturating_sub(data_start),
                dtype.width()
            ));
        }
        Ok(Self {
            map,
            dtype,
            data_start,
            len,
        })
    }

    /// Unmaps the pages read so far (`MADV_DONTNEED`), so that they leave this process's
    /// resident set; the next read maps them again from the page cache or the file. The
    /// kernel maps up to 16 cached neighbours of each page read (fault-around, which
    /// `MADV_RANDOM` does not stop), so without this a run's RSS would grow towards the
    /// size of the files it samples from.
    pub fn release(&self) {
        // Safety: the map is read-only and nothing writes its file (see `open`): dropping
        // its pages changes no value a later read sees. An error only keeps the pages.
        #[cfg(unix)]
        let _ = unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Value `i`, widened to `u64`.
    ///
    /// # Panics
    /// If `i >= len`.
    pub fn get(&self, i: usize) -> u64 {
        assert!(i < self.len, "index {i} of an array of {}", self.len);
        let at = self.data_start + i * self.dtype.width();
        let bytes = &self.map[at..at + self.dtype.width()];
        match self.dtype {
            Dtype::U16 => u64::from(u16::from_le_bytes([bytes[0], bytes[1]])),
            Dtype::U32 => u64::from(u32::from_le_bytes(bytes.try_into().expect("4 bytes"))),
            Dtype::U64 => u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
        }
    }

    /// Values `range` as token ids.
    ///
    /// # Panics
    /// If the range leaves the array.
    pub fn ids(&self, range: std::ops::Range<usize>) -> Vec<u32> {
        range.map(|i| self.get(i) as u32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip_with_64_byte_aligned_data() {
        let dir = tempfile::tempdir().unwrap();
        for (dtype, values) in [
            (Dtype::U16, vec![0u64, 1, 65_535]),
            (Dtype::U32, vec![70_000, 4_000_000_000]),
            (Dtype::U64, vec![]),
        ] {
            let bytes = npy_bytes(dtype, values.iter().copied());
            assert_eq!((bytes.len() - values.len() * dtype.width()) % 64, 0);
            let path = dir.path().join("a.npy");
            std::fs::write(&path, &bytes).unwrap();
            let array = NpyArray::open(&path).unwrap();
            assert_eq!(array.dtype(), dtype);
            let read: Vec<u64> = (0..array.len()).map(|i| array.get(i)).collect();
            assert_eq!(read, values);
        }
    }

    #[test]
    fn a_truncated_array_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        let bytes = npy_bytes(Dtype::U16, [1u64, 2, 3].into_iter());
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let error = NpyArray::open(&path).err().unwrap();
        assert!(error.contains("header says 3 values"), "{error}");
    }
}
