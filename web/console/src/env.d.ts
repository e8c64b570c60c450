// esbuild bundles imported CSS into assets/app-HASH.css.
declare module "*.css";
