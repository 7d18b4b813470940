pub mod check;
pub mod cli;
pub mod conform;
pub mod error;
pub mod model;
pub mod props;
pub mod report;
pub mod system;
