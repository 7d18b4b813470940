//! A serde codec for bincode 1's fixed-width little-endian format, byte for byte what
//! `bincode::DefaultOptions::new().with_fixint_encoding()` writes and reads, written for a hot
//! path (a write is a store, a read a load, decoding in place). It was the search frontier's
//! format; the frontier now holds each engine's packed form (`crate::system::collections::pack`,
//! no serde visitor per field: `crate::check::hooks`), and this codec remains the serde
//! (non-human-readable) form of the state types, which the tests hold to bincode's bytes.
//!
//! The format: integers fixed-width little-endian (`bool` one byte, 0 or 1; `char` its UTF-8
//! bytes), a sequence, map, string or byte string its length as a `u64` then its items, an
//! `Option` a byte (0 or 1) then its value, an enum its variant index as a `u32` then its
//! fields, a struct or tuple its fields in order, unit nothing. Self-describing reads
//! (`deserialize_any`) are not supported, as in bincode.
//!
//! Why not bincode itself: its writer goes through `std::io::Write` and its reader through
//! `std::io::Read`, with a boxed error per call site; here a write is a capacity check and a
//! store, a read a length check and a load (round 18 in docs/benchmarks.md measures it).
//! `tests` holds both directions to bincode's bytes.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};
use std::fmt;

/// A value the codec cannot write or bytes it cannot read (never in a search: the frontier
/// holds only what the codec wrote).
#[derive(Debug)]
pub struct Error(Box<str>);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}
impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string().into())
    }
}
impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string().into())
    }
}

fn err(msg: &str) -> Error {
    Error(msg.to_string().into())
}

/// Append `v`'s encoding to `out`.
#[inline]
pub fn encode<T: Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) -> Result<(), Error> {
    v.serialize(&mut Enc(out))
}

/// The value `bytes` encode (all of them).
pub fn decode<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, Error> {
    let mut d = Dec(bytes);
    let v = T::deserialize(&mut d)?;
    d.end()?;
    Ok(v)
}

/// [`decode`] into `place` (`deserialize_in_place`: its vectors keep their buffers).
#[inline]
pub fn decode_in_place<'de, T: de::Deserialize<'de>>(bytes: &'de [u8], place: &mut T) -> Result<(), Error> {
    let mut d = Dec(bytes);
    T::deserialize_in_place(&mut d, place)?;
    d.end()
}

/// The writer: the output buffer.
pub struct Enc<'a>(pub &'a mut Vec<u8>);

impl Enc<'_> {
    #[inline(always)]
    fn put<const N: usize>(&mut self, b: [u8; N]) {
        let v = &mut *self.0;
        v.reserve(N);
        let len = v.len();
        // SAFETY: `reserve` made room for N more bytes after `len`; they are written before the
        // length covers them, and a byte array has no alignment to keep.
        unsafe {
            std::ptr::write_unaligned(v.as_mut_ptr().add(len).cast::<[u8; N]>(), b);
            v.set_len(len + N);
        }
    }
    #[inline(always)]
    fn len(&mut self, n: Option<usize>) -> Result<(), Error> {
        match n {
            Some(n) => {
                self.put((n as u64).to_le_bytes());
                Ok(())
            }
            None => Err(err("the codec needs the length of a sequence or map before its items")),
        }
    }
}

macro_rules! put_int {
    ($($f:ident: $t:ty),*) => {$(
        #[inline(always)]
        fn $f(self, v: $t) -> Result<(), Error> {
            self.put(v.to_le_bytes());
            Ok(())
        }
    )*};
}

impl<'a> ser::Serializer for &mut Enc<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    put_int!(serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_u128: u128,
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64, serialize_i128: i128,
        serialize_f32: f32, serialize_f64: f64);

    #[inline(always)]
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.put([v as u8]);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        let mut b = [0u8; 4];
        self.0.extend_from_slice(v.encode_utf8(&mut b).as_bytes());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.serialize_bytes(v.as_bytes())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        self.put((v.len() as u64).to_le_bytes());
        self.0.extend_from_slice(v);
        Ok(())
    }
    #[inline(always)]
    fn serialize_none(self) -> Result<(), Error> {
        self.put([0u8]);
        Ok(())
    }
    #[inline(always)]
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        self.put([1u8]);
        v.serialize(self)
    }
    #[inline(always)]
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    #[inline(always)]
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    #[inline(always)]
    fn serialize_unit_variant(self, _: &'static str, i: u32, _: &'static str) -> Result<(), Error> {
        self.put(i.to_le_bytes());
        Ok(())
    }
    #[inline(always)]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<(), Error> {
        v.serialize(self)
    }
    #[inline(always)]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.put(i.to_le_bytes());
        v.serialize(self)
    }
    #[inline(always)]
    fn serialize_seq(self, n: Option<usize>) -> Result<Self, Error> {
        self.len(n)?;
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple(self, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple_variant(self, _: &'static str, i: u32, _: &'static str, _: usize) -> Result<Self, Error> {
        self.put(i.to_le_bytes());
        Ok(self)
    }
    #[inline(always)]
    fn serialize_map(self, n: Option<usize>) -> Result<Self, Error> {
        self.len(n)?;
        Ok(self)
    }
    #[inline(always)]
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_struct_variant(self, _: &'static str, i: u32, _: &'static str, _: usize) -> Result<Self, Error> {
        self.put(i.to_le_bytes());
        Ok(self)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The compound writers: items in order, nothing around them.
macro_rules! compound {
    ($($tr:ident :: $f:ident $(($key:ident))?),*) => {$(
        impl<'a> ser::$tr for &mut Enc<'a> {
            type Ok = ();
            type Error = Error;
            #[inline(always)]
            fn $f<T: Serialize + ?Sized>(&mut self, $($key: &'static str,)? v: &T) -> Result<(), Error> {
                $(let _ = $key;)?
                v.serialize(&mut **self)
            }
            #[inline(always)]
            fn end(self) -> Result<(), Error> {
                Ok(())
            }
        }
    )*};
}
compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
    SerializeStruct::serialize_field(key),
    SerializeStructVariant::serialize_field(key)
);

impl<'a> ser::SerializeMap for &mut Enc<'a> {
    type Ok = ();
    type Error = Error;
    #[inline(always)]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        k.serialize(&mut **self)
    }
    #[inline(always)]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        v.serialize(&mut **self)
    }
    #[inline(always)]
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

/// The reader: the bytes not read yet.
pub struct Dec<'de>(&'de [u8]);

impl<'de> Dec<'de> {
    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        match self.0.split_first_chunk::<N>() {
            Some((b, rest)) => {
                self.0 = rest;
                Ok(*b)
            }
            None => Err(err("the encoding ends early")),
        }
    }
    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Result<&'de [u8], Error> {
        if self.0.len() < n {
            return Err(err("the encoding ends early"));
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(b)
    }
    #[inline(always)]
    fn len(&mut self) -> Result<usize, Error> {
        let n = u64::from_le_bytes(self.take()?);
        // Not bounded by the bytes left (a unit item takes none); `Items::size_hint` is.
        usize::try_from(n).map_err(|_| err("a length does not fit in memory"))
    }
    #[inline(always)]
    fn tag(&mut self) -> Result<bool, Error> {
        match self.take::<1>()?[0] {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(err("a bool or an Option's tag is not 0 or 1")),
        }
    }
    fn end(&self) -> Result<(), Error> {
        match self.0.is_empty() {
            true => Ok(()),
            false => Err(err("bytes remain after the value")),
        }
    }
}

macro_rules! get_int {
    ($($f:ident: $t:ty => $visit:ident),*) => {$(
        #[inline(always)]
        fn $f<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            v.$visit(<$t>::from_le_bytes(self.take()?))
        }
    )*};
}

/// Items counted down: a sequence, tuple, struct or map.
struct Items<'a, 'de> {
    d: &'a mut Dec<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Items<'_, 'de> {
    type Error = Error;
    #[inline(always)]
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.d).map(Some)
    }
    #[inline(always)]
    fn size_hint(&self) -> Option<usize> {
        // Bounded by the bytes left (an item is at least one byte, but a unit is none): a
        // corrupt length must not make a visitor reserve gigabytes.
        Some(self.left.min(self.d.0.len()))
    }
}

impl<'de> de::MapAccess<'de> for Items<'_, 'de> {
    type Error = Error;
    #[inline(always)]
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.d).map(Some)
    }
    #[inline(always)]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(&mut *self.d)
    }
    #[inline(always)]
    fn size_hint(&self) -> Option<usize> {
        Some(self.left.min(self.d.0.len()))
    }
}

impl<'de> de::EnumAccess<'de> for &mut Dec<'de> {
    type Error = Error;
    type Variant = Self;
    #[inline(always)]
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let i = u32::from_le_bytes(self.take()?);
        let v = seed.deserialize(IntoDeserializer::<Error>::into_deserializer(i))?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Dec<'de> {
    type Error = Error;
    #[inline(always)]
    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }
    #[inline(always)]
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }
    #[inline(always)]
    fn tuple_variant<V: Visitor<'de>>(self, n: usize, v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items { d: self, left: n })
    }
    #[inline(always)]
    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items { d: self, left: fields.len() })
    }
}

impl<'de> de::Deserializer<'de> for &mut Dec<'de> {
    type Error = Error;

    get_int!(deserialize_u8: u8 => visit_u8, deserialize_u16: u16 => visit_u16, deserialize_u32: u32 => visit_u32,
        deserialize_u64: u64 => visit_u64, deserialize_u128: u128 => visit_u128, deserialize_i8: i8 => visit_i8,
        deserialize_i16: i16 => visit_i16, deserialize_i32: i32 => visit_i32, deserialize_i64: i64 => visit_i64,
        deserialize_i128: i128 => visit_i128, deserialize_f32: f32 => visit_f32, deserialize_f64: f64 => visit_f64);

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(err("the frontier codec is not self-describing (deserialize_any)"))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(err("the frontier codec is not self-describing (deserialize_ignored_any)"))
    }
    #[inline(always)]
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_bool(self.tag()?)
    }
    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let first = self.take::<1>()?[0];
        let width = match first {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return Err(err("a char is not UTF-8")),
        };
        let mut b = [first, 0, 0, 0];
        b[1..width].copy_from_slice(self.bytes(width - 1)?);
        match std::str::from_utf8(&b[..width]).ok().and_then(|s| s.chars().next()) {
            Some(c) => v.visit_char(c),
            None => Err(err("a char is not UTF-8")),
        }
    }
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let n = self.len()?;
        match std::str::from_utf8(self.bytes(n)?) {
            Ok(s) => v.visit_borrowed_str(s),
            Err(_) => Err(err("a string is not UTF-8")),
        }
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_str(v)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let n = self.len()?;
        v.visit_borrowed_bytes(self.bytes(n)?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(v)
    }
    #[inline(always)]
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.tag()? {
            false => v.visit_none(),
            true => v.visit_some(self),
        }
    }
    #[inline(always)]
    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_unit()
    }
    #[inline(always)]
    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Result<V::Value, Error> {
        v.visit_unit()
    }
    #[inline(always)]
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }
    #[inline(always)]
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let left = self.len()?;
        v.visit_seq(Items { d: self, left })
    }
    #[inline(always)]
    fn deserialize_tuple<V: Visitor<'de>>(self, n: usize, v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items { d: self, left: n })
    }
    #[inline(always)]
    fn deserialize_tuple_struct<V: Visitor<'de>>(self, _: &'static str, n: usize, v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items { d: self, left: n })
    }
    #[inline(always)]
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let left = self.len()?;
        v.visit_map(Items { d: self, left })
    }
    #[inline(always)]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_seq(Items { d: self, left: fields.len() })
    }
    #[inline(always)]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(err("the frontier codec writes no identifiers"))
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
