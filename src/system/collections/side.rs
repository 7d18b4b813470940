//! Side data that trace replay switches on so that a step costs what it changes, not what the
//! whole state holds: change logs (which GPU blocks and host keys a transition touched, for
//! incremental invariant checks) and caches (which prefix of a request's block table was
//! already read and found right). None of it is state: [`Side`] compares equal and hashes to
//! nothing whatever it holds, and the model checker never turns it on (`Side(None)`), so
//! state identity and state counts are untouched.

use super::vec_map::VecMap;
use crate::system::types::{BlockHash, BlockHash as Key, BlockId};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A hasher for keys that are already hashes or small integers (block hashes, block ids):
/// words combined by rotation and xor, one multiply-xorshift to finish. Side maps only;
/// never iterated for decisions.
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let z = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z ^ (z >> 29)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        // A rotation keeps the words of a tuple key apart; `finish` does the mixing (one
        // multiplication on a lookup's critical path, not two).
        self.0 = self.0.rotate_left(29) ^ i;
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A `HashMap` with [`WordHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// A value outside the state: always equal, never hashed.
#[derive(Clone, Debug)]
pub struct Side<T>(pub Option<Box<T>>);

impl<T> Default for Side<T> {
    fn default() -> Self {
        Side(None)
    }
}
impl<T> PartialEq for Side<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Side<T> {}
impl<T> Hash for Side<T> {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}
// Not state: the search's encoded frontier (`crate::search`) keeps none of it, and the checker
// never turns it on. It encodes to nothing and decodes as off.
impl<T> serde::Serialize for Side<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}
impl<'de, T> serde::Deserialize<'de> for Side<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <()>::deserialize(d).map(|()| Side(None))
    }
}

/// A small value outside the state, kept inline: always equal, never hashed.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SideVal<T>(pub T);

impl<T> PartialEq for SideVal<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for SideVal<T> {}
impl<T> Hash for SideVal<T> {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

/// The identity of one decoded frontier state (the search's `decode_into` gives each a fresh
/// one), for the checker's step memo (`System::take_step_memo`): the state a property's
/// deadlock check stepped is the state the search then expands iff their stamps match, which
/// spares a copy and a comparison of the whole engine per state. Not state: always equal,
/// never hashed or encoded, and a clone is unstamped (0), so only the decoded engine itself
/// carries it, and the search holds that engine read-only until its last action, which
/// `System::apply_last_in_place` writes into it after resetting the stamp to 0.
#[derive(Debug, Default)]
pub struct Stamp(u64);

impl Stamp {
    /// A stamp no other engine has had (never 0).
    pub fn fresh() -> Stamp {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Stamp(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
    /// 0: unstamped (a clone, a step's result, a state built whole).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0
    }
}
impl Clone for Stamp {
    #[inline]
    fn clone(&self) -> Self {
        Stamp(0)
    }
    #[inline]
    fn clone_from(&mut self, _: &Self) {
        self.0 = 0;
    }
}
impl PartialEq for Stamp {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Stamp {}
impl Hash for Stamp {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl<T> Side<T> {
    #[inline]
    pub fn get(&self) -> Option<&T> {
        self.0.as_deref()
    }
    #[inline]
    pub fn get_mut(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut()
    }
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }
}

/// What the G1 pool changed since the log was last drained, and the read cache's per-block
/// counts.
#[derive(Clone, Debug, Default)]
pub struct PoolLog {
    /// Blocks whose reference count or free-queue membership changed.
    pub(crate) blocks: Vec<BlockId>,
    /// Blocks whose content changed.
    pub(crate) content: Vec<BlockId>,
    /// (hash, block) pairs added to or removed from the cached map.
    pub(crate) cached: Vec<(BlockHash, BlockId)>,
    /// Per block: how many requests' verified read prefixes ([`ReadCache`]) contain it.
    pub(crate) verified_by: Vec<u16>,
    /// A block inside some verified prefix got new content: every verified prefix is void.
    pub(crate) stale: bool,
    /// A block inside some verified prefix left a block table (tables change only by
    /// appending or by being taken whole): the prefixes must be compared with their tables.
    pub(crate) recheck: bool,
    /// Blocks that gained a holder (a block table, a deferred free), and blocks that lost one.
    pub(crate) table_added: Vec<BlockId>,
    pub(crate) table_removed: Vec<BlockId>,
    /// Recent prefix lookups (`find_longest_cache_hit`), most recent first.
    pub(crate) hit_memo: Vec<HitMemo>,
    /// Block tables taken whole so far (any request's): a table not taken since it was last
    /// compared has only grown since.
    pub(crate) table_takes: u64,
}

/// A remembered prefix lookup. It stays right until the cached map changes the blocks listed
/// under one of the hashes it read (the hits and the first miss): `watch`.
#[derive(Clone, Debug, Default)]
pub struct HitMemo {
    pub(crate) hashes: Vec<BlockHash>,
    pub(crate) result: Vec<BlockId>,
    pub(crate) watch: FastMap<BlockHash, ()>,
    pub(crate) valid: bool,
}

impl PoolLog {
    /// The cached map changed what it lists under `h`.
    #[inline]
    pub fn cached_changed(&mut self, h: &BlockHash) {
        for m in &mut self.hit_memo {
            if m.valid && m.watch.contains_key(h) {
                m.valid = false;
            }
        }
    }
}

/// What the host tier changed since the log was last drained.
#[derive(Clone, Debug, Default)]
pub struct HostLog {
    /// Every change of a key's reference count: (key, before, after), None = not resident.
    pub(crate) moves: Vec<(Key, Option<i32>, Option<i32>)>,
    /// Keys whose content was written or that became ready.
    pub(crate) written: Vec<Key>,
}

/// The forward pass's read cache: per request slot, the leading blocks of its table that a
/// forward pass already read and found holding the request's own prefix, unchanged since
/// (no write, no load landed on any of them: `PoolLog::verified_by` / `stale` watch that).
#[derive(Clone, Debug, Default)]
pub struct ReadCache {
    pub(crate) verified: Vec<Vec<BlockId>>,
}

/// Entries a checker's `KeyMap` keeps inline (more spill to the heap).
pub const KEY_MAP_INLINE: usize = 4;

/// A map that is a sorted inline vector in the checker ([`VecMap`]: ordered, hashed exactly as a
/// `BTreeMap`) and a hash map in trace replay (O(1) operations on 65k-entry host tiers). Equality compares
/// contents, whatever the representation.
///
/// The hash form keeps an auxiliary value `A` next to each entry: replay's side data about
/// the key, in the same cache line as the entry (the tree form has none). It is not part of
/// the map's contents: equality and hashing ignore it.
///
/// Serialized as the derive writes an enum of two newtype variants (by index or by name), the
/// hash form as a map from each key to its value and side value.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(bound(deserialize = "K: Ord + Hash + serde::Deserialize<'de>, V: serde::Deserialize<'de>, \
                             A: serde::Deserialize<'de>"))]
pub enum KeyMap<K, V, A = ()> {
    Tree(VecMap<K, V, KEY_MAP_INLINE>),
    Hash(FastMap<K, (V, A)>),
}

impl<K: Clone + Ord + super::bitwise::Bitwise, V: Clone + super::bitwise::Bitwise, A: Clone> Clone for KeyMap<K, V, A> {
    fn clone(&self) -> Self {
        match self {
            KeyMap::Tree(m) => KeyMap::Tree(m.clone()),
            KeyMap::Hash(m) => KeyMap::Hash(m.clone()),
        }
    }
    /// The tree form reuses its allocation, if any (see `clone_fields`).
    fn clone_from(&mut self, src: &Self) {
        match (self, src) {
            (KeyMap::Tree(a), KeyMap::Tree(b)) => a.clone_from(b),
            (a, b) => *a = b.clone(),
        }
    }
}

impl<K, V, A> Default for KeyMap<K, V, A> {
    fn default() -> Self {
        KeyMap::Tree(VecMap::default())
    }
}

/// Iterator over a [`KeyMap`] (key order for `Tree`, arbitrary for `Hash`).
pub enum KeyMapIter<'a, K, V, A = ()> {
    Tree(super::vec_map::Iter<'a, K, V>),
    Hash(std::collections::hash_map::Iter<'a, K, (V, A)>),
}

impl<'a, K, V, A> Iterator for KeyMapIter<'a, K, V, A> {
    type Item = (&'a K, &'a V);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            KeyMapIter::Tree(i) => i.next(),
            KeyMapIter::Hash(i) => i.next().map(|(k, (v, _))| (k, v)),
        }
    }
}

impl<K: Ord + Hash + Eq + Copy, V, A: Default> KeyMap<K, V, A> {
    /// Switch to the hash representation (replay), sized for `capacity` entries at once
    /// (growing by doubling would rehash every entry each time).
    ///
    /// The table gets room for twice `capacity`: removals leave tombstones, and hashbrown
    /// clears them in place only while the table is at most half full. A map held near
    /// `capacity` with room for just `capacity` doubled once its tombstones ran out (the
    /// host map went from 10 to 21 MiB under a thousand requests into the Mooncake trace:
    /// a copy, a second table to fault in, and the first left behind).
    pub fn use_hash(&mut self, capacity: usize) {
        if let KeyMap::Tree(t) = self {
            let t = std::mem::take(t);
            let mut m = FastMap::with_capacity_and_hasher(2 * capacity.max(t.len()), Default::default());
            m.extend(t.into_entries().map(|(k, v)| (k, (v, A::default()))));
            *self = KeyMap::Hash(m);
        }
    }
    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        match self {
            KeyMap::Tree(m) => m.get(k),
            KeyMap::Hash(m) => m.get(k).map(|(v, _)| v),
        }
    }
    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match self {
            KeyMap::Tree(m) => m.get_mut(k),
            KeyMap::Hash(m) => m.get_mut(k).map(|(v, _)| v),
        }
    }
    /// The value under `k` and, in the hash form, its auxiliary value.
    #[inline]
    pub fn get_mut_aux(&mut self, k: &K) -> Option<(&mut V, Option<&mut A>)> {
        match self {
            KeyMap::Tree(m) => m.get_mut(k).map(|v| (v, None)),
            KeyMap::Hash(m) => m.get_mut(k).map(|(v, a)| (v, Some(a))),
        }
    }
    /// The value of `k` and, in the hash form, its auxiliary value.
    #[inline]
    pub fn get_aux(&self, k: &K) -> Option<(&V, Option<&A>)> {
        match self {
            KeyMap::Tree(m) => m.get(k).map(|v| (v, None)),
            KeyMap::Hash(m) => m.get(k).map(|(v, a)| (v, Some(a))),
        }
    }
    /// The auxiliary value of `k` (hash form only).
    #[inline]
    pub fn aux(&self, k: &K) -> Option<&A> {
        match self {
            KeyMap::Tree(_) => None,
            KeyMap::Hash(m) => m.get(k).map(|(_, a)| a),
        }
    }
    #[inline]
    pub fn contains_key(&self, k: &K) -> bool {
        match self {
            KeyMap::Tree(m) => m.contains_key(k),
            KeyMap::Hash(m) => m.contains_key(k),
        }
    }
    /// Insert; a replaced entry keeps its auxiliary value, a new one starts at the default.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.insert_aux(k, v).0
    }
    /// [`insert`](Self::insert), also giving the entry's auxiliary value (hash form).
    #[inline]
    pub fn insert_aux(&mut self, k: K, v: V) -> (Option<V>, Option<&mut A>) {
        use std::collections::hash_map::Entry;
        match self {
            KeyMap::Tree(m) => (m.insert(k, v), None),
            KeyMap::Hash(m) => match m.entry(k) {
                Entry::Occupied(o) => {
                    let (x, a) = o.into_mut();
                    (Some(std::mem::replace(x, v)), Some(a))
                }
                Entry::Vacant(e) => (None, Some(&mut e.insert((v, A::default())).1)),
            },
        }
    }
    #[inline]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.remove_aux(k).map(|(v, _)| v)
    }
    /// Remove, returning the value and (hash form) its auxiliary value.
    #[inline(always)]
    pub fn remove_aux(&mut self, k: &K) -> Option<(V, Option<A>)> {
        match self {
            KeyMap::Tree(m) => m.remove(k).map(|v| (v, None)),
            KeyMap::Hash(m) => m.remove(k).map(|(v, a)| (v, Some(a))),
        }
    }
    /// Apply `f` to the value under `k` (if any) and remove the entry when `f` says it is
    /// done (one lookup).
    #[inline(always)]
    pub fn update_or_remove(&mut self, k: K, f: impl FnOnce(&mut V) -> bool) {
        match self {
            KeyMap::Tree(m) => m.update_or_remove(&k, f),
            KeyMap::Hash(m) => {
                if let std::collections::hash_map::Entry::Occupied(mut o) = m.entry(k) {
                    if f(&mut o.get_mut().0) {
                        o.remove();
                    }
                }
            }
        }
    }
    /// The value under `k`, inserted with `V::default()` if absent.
    #[inline(always)]
    pub fn entry_or_default(&mut self, k: K) -> &mut V
    where
        V: Default,
    {
        match self {
            KeyMap::Tree(m) => m.entry_or_default(k),
            KeyMap::Hash(m) => &mut m.entry(k).or_default().0,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            KeyMap::Tree(m) => m.len(),
            KeyMap::Hash(m) => m.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> KeyMapIter<'_, K, V, A> {
        match self {
            KeyMap::Tree(m) => KeyMapIter::Tree(m.iter()),
            KeyMap::Hash(m) => KeyMapIter::Hash(m.iter()),
        }
    }
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
    pub fn values_mut(&mut self) -> Box<dyn Iterator<Item = &mut V> + '_> {
        match self {
            KeyMap::Tree(m) => Box::new(m.values_mut()),
            KeyMap::Hash(m) => Box::new(m.values_mut().map(|(v, _)| v)),
        }
    }
}

impl<K: Ord + Hash + Eq + Copy, V: PartialEq, A: Default> PartialEq for KeyMap<K, V, A> {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (KeyMap::Tree(a), KeyMap::Tree(b)) => a == b,
            _ => self.len() == o.len() && self.iter().all(|(k, v)| o.get(k) == Some(v)),
        }
    }
}
impl<K: Ord + Hash + Eq + Copy, V: Eq, A: Default> Eq for KeyMap<K, V, A> {}

impl<K: Ord + Hash + Eq + Copy, V: Hash, A: Default> Hash for KeyMap<K, V, A> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            // Exactly a BTreeMap's hash.
            KeyMap::Tree(m) => m.hash(h),
            KeyMap::Hash(m) => {
                let mut v: Vec<(&K, &V)> = m.iter().map(|(k, (v, _))| (k, v)).collect();
                v.sort_unstable_by(|a, b| a.0.cmp(b.0));
                h.write_usize(v.len());
                for (k, x) in v {
                    k.hash(h);
                    x.hash(h);
                }
            }
        }
    }
}

/// Packed (`super::pack`): nothing (not state); decoded as off, as serde's form is.
impl<T> super::pack::Pack for Side<T> {
    #[inline(always)]
    fn pack(&self, _: &mut Vec<u8>) {}
    #[inline(always)]
    fn unpack(&mut self, _: &mut super::pack::Reader<'_>) -> Option<()> {
        self.0 = None;
        Some(())
    }
}

/// Packed (`super::pack`): its value (the derive encodes it: replay's side data).
impl<T: super::pack::Pack> super::pack::Pack for SideVal<T> {
    #[inline(always)]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out)
    }
    #[inline(always)]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        self.0.unpack(r)
    }
}

/// Packed (`super::pack`): a tag (0 the checker's tree, 1 replay's hash map), then the entries
/// in key order (the hash form sorted, with its side values).
impl<K, V, A> super::pack::Pack for KeyMap<K, V, A>
where
    K: super::pack::Pack + Default + Ord + Hash + Copy,
    V: super::pack::Pack + Default,
    A: super::pack::Pack + Default,
{
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            KeyMap::Tree(m) => {
                super::pack::put(out, [0]);
                m.pack(out);
            }
            KeyMap::Hash(m) => {
                super::pack::put(out, [1]);
                let mut keys: Vec<&K> = m.keys().collect();
                keys.sort();
                super::pack::put_len(out, keys.len());
                for k in keys {
                    k.pack(out);
                    let (v, a) = &m[k];
                    v.pack(out);
                    a.pack(out);
                }
            }
        }
    }
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        match r.tag()? {
            0 => {
                if !matches!(self, KeyMap::Tree(_)) {
                    *self = KeyMap::default();
                }
                let KeyMap::Tree(m) = self else { unreachable!() };
                m.unpack(r)
            }
            1 => {
                let n = r.len()?;
                if n > r.0.len() {
                    return None;
                }
                let mut m = FastMap::default();
                for _ in 0..n {
                    let mut e: (K, (V, A)) = Default::default();
                    e.0.unpack(r)?;
                    e.1 .0.unpack(r)?;
                    e.1 .1.unpack(r)?;
                    m.insert(e.0, e.1);
                }
                *self = KeyMap::Hash(m);
                Some(())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KeyMap;
    use bincode::Options;

    fn tree() -> KeyMap<u32, u16> {
        let mut m = KeyMap::default();
        m.insert(3, 30);
        m.insert(1, 10);
        m
    }

    /// The JSON text of both forms (the derive's: an enum of two newtype variants, the tree's
    /// entries as pairs in key order, the hash form's as a map to a value and its side value),
    /// and it reads back to an equal map of the same form.
    #[test]
    fn json_form() {
        let t = tree();
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"{"Tree":[[1,10],[3,30]]}"#);
        let back = serde_json::from_str::<KeyMap<u32, u16>>(&json).unwrap();
        assert!(back == t && matches!(back, KeyMap::Tree(_)));

        let mut h = KeyMap::<u32, u16>::default();
        h.insert(7, 70);
        h.use_hash(4);
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(json, r#"{"Hash":{"7":[70,null]}}"#);
        let back = serde_json::from_str::<KeyMap<u32, u16>>(&json).unwrap();
        assert!(back == h && matches!(back, KeyMap::Hash(_)));
        let mut two = tree();
        two.use_hash(4);
        let back = serde_json::from_str::<KeyMap<u32, u16>>(&serde_json::to_string(&two).unwrap()).unwrap();
        assert!(back == two && matches!(back, KeyMap::Hash(_)));
    }

    /// Bincode's fixed-width form: the variant's index as a `u32`, then the entries (a `u64`
    /// length, then each pair); it reads back to an equal map of the same form.
    #[test]
    fn bincode_form() {
        let codec = bincode::DefaultOptions::new().with_fixint_encoding();
        let bytes = codec.serialize(&tree()).unwrap();
        assert_eq!(
            bytes,
            [&[0u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0][..], &[1, 0, 0, 0, 10, 0, 3, 0, 0, 0, 30, 0]].concat()
        );
        let back = codec.deserialize::<KeyMap<u32, u16>>(&bytes).unwrap();
        assert!(back == tree() && matches!(back, KeyMap::Tree(_)));
        let mut h = tree();
        h.use_hash(4);
        let bytes = codec.serialize(&h).unwrap();
        assert_eq!(bytes[..4], [1, 0, 0, 0]);
        let back = codec.deserialize::<KeyMap<u32, u16>>(&bytes).unwrap();
        assert!(back == h && matches!(back, KeyMap::Hash(_)));
    }

    /// A variant index past the enum's, or an unknown name, is an error (never a panic or a
    /// wrong variant).
    #[test]
    fn an_unknown_variant_is_an_error() {
        let codec = bincode::DefaultOptions::new().with_fixint_encoding();
        let mut bytes = codec.serialize(&KeyMap::<u32, u16>::default()).unwrap();
        bytes[..4].copy_from_slice(&2u32.to_le_bytes());
        assert!(codec.deserialize::<KeyMap<u32, u16>>(&bytes).is_err());
        let err = serde_json::from_str::<KeyMap<u32, u16>>(r#"{"Vec":{}}"#).unwrap_err().to_string();
        assert!(err.contains("unknown variant `Vec`"), "{err}");
    }
}
