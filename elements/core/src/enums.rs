//! Enum properties' types, declared once: [`property_enum!`](crate::property_enum)
//! writes the derives, `#[repr(u32)]` and GType name every such enum repeats, and takes
//! each value as one line (its doc, number, nick and description).

/// Declares an enum as a GObject enum type (`glib::Enum`), for an element's enum
/// property: `$name = "GType name"`, then one line per value, `Variant = number, "nick",
/// "description";` under its doc comment (and `#[default]` on the default). The enum
/// derives `Debug`, `Eq`, `PartialEq`, `Ord`, `PartialOrd`, `Hash`, `Clone`, `Copy` and
/// `Default`. `glib` must be in scope where it is used (`use gst::glib;`), as the
/// derive requires.
///
/// ```
/// use gst::glib;
///
/// firehose_core::property_enum! {
///     /// `speed`: how fast.
///     pub enum Speed = "GstFhExampleSpeed" {
///         /// Slowly.
///         #[default]
///         Slow = 0, "slow", "Slow: one at a time";
///         /// Quickly.
///         Fast = 1, "fast", "Fast: all at once";
///     }
/// }
///
/// use glib::prelude::*;
/// gst::init().unwrap();
/// assert_eq!(Speed::static_type().name(), "GstFhExampleSpeed");
/// let class = glib::EnumClass::with_type(Speed::static_type()).unwrap();
/// let fast = class.value_by_nick("fast").unwrap();
/// assert_eq!((fast.value(), fast.name()), (1, "Fast: all at once"));
/// assert_eq!(Speed::default(), Speed::Slow);
/// ```
#[macro_export]
macro_rules! property_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident = $type_name:literal {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $value:literal, $nick:literal, $description:literal;
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default,
            $crate::__glib::Enum,
        )]
        #[repr(u32)]
        #[enum_type(name = $type_name)]
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                #[enum_value(name = $description, nick = $nick)]
                $variant = $value,
            )+
        }
    };
}
